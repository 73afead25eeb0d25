package slackui_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/slackui/slackuitest"
	"github.com/countersign/countersign/tools"
)

const homeTeamURL = "https://countersign-test.slack.com/"

// waiting is a call waiting in channel C0TEST of a thread whose root is ts.
func waiting(c agent.Call, ts string) runner.Waiting {
	return runner.Waiting{
		InboxEntry: runner.InboxEntry{Thread: slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, ts), Call: c.Key, Tool: c.Tool,
			Requester: cardAsker, Team: slacktest.TeamID, Channel: slacktest.ChannelID, Since: cardNow.Add(-5 * time.Minute),
			Expires: cardNow.Add(time.Hour), Approvers: []string{cardApprover}},
		AgentCall: c,
	}
}

// homeButtons returns the Home view's buttons, by block, as
// "action_id text style value".
func homeButtons(t *testing.T, view slack.HomeTabViewRequest) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, b := range view.Blocks.BlockSet {
		if a, ok := b.(*slack.ActionBlock); ok {
			buttons, values := buttonsOf(t, []slack.Block{a})
			for i, btn := range buttons {
				out[a.BlockID] = append(out[a.BlockID], strings.Join([]string{btn.actionID, btn.text, btn.style, values[i]}, " "))
			}
		}
	}
	return out
}

// The Home view lists each waiting call with what it calls (credentials
// masked, Slack markup escaped), who asked, where, how long it has waited
// and a link to its thread, with the buttons of its card; then what the
// viewer decided lately.
func TestHomeView(t *testing.T) {
	t.Parallel()
	secret := "Bearer s3cr3t-t0ken"
	fetch := callWith(func(c *agent.Call) {
		c.Args = json.RawMessage(`{"method":"GET","url":"https://api.example.com/<!here>","headers":{"Authorization":"` + secret + `"}}`)
	})
	deploy := callWith(func(c *agent.Call) { c.Key, c.Tool, c.Args = "3.1", "deploy", json.RawMessage(`{"version": "2.4.1"}`) })
	view := slackui.HomeView(slackui.HomeContent{
		Calls:   []runner.Waiting{waiting(fetch, "1700000000.000100"), waiting(deploy, "1700000000.000200")},
		Refs:    []string{"ref-fetch", "ref-deploy"},
		TeamURL: homeTeamURL,
		Recent: []runner.DecisionRecord{{Thread: slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, "1690000000.000100"),
			Call: "1.0", Tool: "deploy", Channel: slacktest.ChannelID, By: cardApprover, Kind: agent.Reject, At: cardNow.Add(-time.Hour), Reason: "not <!here>"}},
	}, cardNow)
	if view.Type != slack.VTHomeTab {
		t.Errorf("view type %q, want home", view.Type)
	}
	checkHomeView(t, view)
	compareGolden(t, "home", view)
	raw, _ := json.Marshal(view)
	text := slackuitest.Texts(t, view.Blocks.BlockSet)
	for _, want := range []string{
		"GET https://api.example.com/&lt;!here&gt;",
		"with 1 header",
		"Requested by <@" + cardAsker + "> in <#" + slacktest.ChannelID + ">",
		"waiting 5 min",
		"expires in 1h",
		"sha256:" + tools.ShortHash(fetch.RunHash()),
		"<" + homeTeamURL + "archives/" + slacktest.ChannelID + "/p1700000000000100|Open the thread>",
		`{"version":"2.4.1"}`,
		"🚫 Rejected `deploy` in <#" + slacktest.ChannelID + ">",
		"not &lt;!here&gt;",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the Home view does not show %q:\n%s", want, text)
		}
	}
	if strings.Contains(string(raw), "s3cr3t") {
		t.Errorf("the Home view shows the credential:\n%s", raw)
	}
	buttons := homeButtons(t, view)
	want := map[string][]string{
		"call_actions_0": {"approve Approve primary ref-fetch", "edit Edit  ref-fetch", "reject Reject danger ref-fetch", "show_args Show all  ref-fetch"},
		"call_actions_1": {"approve Approve primary ref-deploy", "edit Edit  ref-deploy", "reject Reject danger ref-deploy"},
	}
	if fmt.Sprint(buttons) != fmt.Sprint(want) {
		t.Errorf("buttons = %v, want %v", buttons, want)
	}

	empty := slackuitest.Texts(t, slackui.HomeView(slackui.HomeContent{Notice: "You can't decide this call."}, cardNow).Blocks.BlockSet)
	for _, want := range []string{"Nothing waits for you", "Nothing yet.", "⚠️ You can't decide this call."} {
		if !strings.Contains(empty, want) {
			t.Errorf("the empty Home view does not say %q:\n%s", want, empty)
		}
	}
}

// However many calls wait, with however hostile arguments, the Home view
// keeps to Slack's limits: 100 blocks, unique block IDs, texts within
// their limits and no markup from the input.
func TestHomeViewLimits(t *testing.T) {
	t.Parallel()
	var calls []runner.Waiting
	var refs []string
	args := []json.RawMessage{
		hugeArgs(100_000, "<&>`"),
		json.RawMessage(`{"method":"GET","url":"https://example.com/` + strings.Repeat("🙂<>", 3000) + `"}`),
		json.RawMessage(strings.Repeat("```<!channel>", 1000)),
	}
	for i := range 40 {
		c := callWith(func(c *agent.Call) {
			c.Key, c.Tool, c.Args = fmt.Sprint("9.", i), strings.Repeat("tool_🙂", 20), args[i%len(args)]
			if i%3 == 1 {
				c.Tool = tools.HTTPRequestName
			}
		})
		w := waiting(c, fmt.Sprintf("1700000000.%06d", i))
		w.Requester, w.Channel = "<!channel>", "C0<!here>"
		calls = append(calls, w)
		refs = append(refs, fmt.Sprint("ref-", i))
	}
	var recent []runner.DecisionRecord
	for i := range 30 {
		recent = append(recent, runner.DecisionRecord{Thread: "not a slack thread", Tool: strings.Repeat("t<", 200), Channel: "<!here>",
			Kind: agent.Kind(1 + i%5), By: cardApprover, At: cardNow, Reason: strings.Repeat("<!here> ``` ", 300)})
	}
	view := slackui.HomeView(slackui.HomeContent{Calls: calls[:15], Refs: refs[:15], More: true, Recent: recent,
		Notice: strings.Repeat("<@U0X> ", 1000), TeamURL: homeTeamURL}, cardNow)
	checkHomeView(t, view)
}

// homeMarkup is the markup the Home view adds to what cards do: channel
// mentions and links to threads.
var homeMarkup = regexp.MustCompile(`<#C[A-Z0-9]+>|<https://[a-z0-9.-]+/archives/C[A-Z0-9]+/p[0-9]+\|[^<>|]+>`)

// checkHomeView checks a Home view against Slack's limits.
func checkHomeView(t *testing.T, view slack.HomeTabViewRequest) {
	t.Helper()
	if n := len(view.Blocks.BlockSet); n == 0 || n > 100 {
		t.Fatalf("the Home view has %d blocks, want 1 to 100", n)
	}
	var ids []string
	var rest []slack.Block // what checkBlocksJSON knows: all but dividers
	for _, b := range view.Blocks.BlockSet {
		if id := b.ID(); id != "" {
			ids = append(ids, id)
		}
		if b.BlockType() != slack.MBTDivider {
			rest = append(rest, b)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ids)))) != len(ids) {
		t.Errorf("block IDs repeat: %v", ids)
	}
	// The texts with < and > as they are, for the markup to be found.
	marshalled, err := json.Marshal(rest)
	if err != nil {
		t.Fatal(err)
	}
	var generic any
	_ = json.Unmarshal(marshalled, &generic)
	var raw bytes.Buffer
	enc := json.NewEncoder(&raw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(generic); err != nil {
		t.Fatal(err)
	}
	checkBlocksJSON(t, homeMarkup.ReplaceAll(raw.Bytes(), []byte("#x")))
}
