package slackui_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/slackui/slackuitest"
	"github.com/countersign/countersign/tools"
)

// The -update flag rewrites the golden files in testdata/. Several test
// files of the package may want it; it is registered once, by whichever
// comes first.
var _ = func() bool {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files in testdata/")
	}
	return true
}()

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

var (
	cardNow     = time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
	cardDecided = cardNow.Add(12 * time.Minute)
)

const (
	cardAsker    = "U0ASKER"
	cardApprover = "U0BOB"
	cardRef      = "r_7Jq2kX9vTb"
)

// pending is a call waiting for approval; the other fixtures derive from it.
func pendingCall() agent.Call {
	return agent.Call{
		Key:           "3.0",
		ID:            "call_3_0",
		Tool:          "http_request",
		Args:          json.RawMessage(`{"method":"POST","url":"https://api.example.com/v1/deploys","headers":{"Content-Type":"application/json"},"body":"{\"service\":\"billing\",\"version\":\"2.4.1\"}"}`),
		Reason:        "You asked to deploy billing 2.4.1 & to notify <#ops>; this calls the deploy API.",
		Status:        agent.Pending,
		NeedsApproval: true,
		Expires:       cardNow.Add(24 * time.Hour),
	}
}

// with returns the pending call changed by fn.
func callWith(fn func(c *agent.Call)) agent.Call {
	c := pendingCall()
	fn(&c)
	return c
}

func decisionOf(kind agent.Kind, reason string) *agent.Decision {
	d := &agent.Decision{Kind: kind, By: cardApprover, At: cardDecided, Reason: reason}
	if kind == agent.Expire {
		d.By, d.At = "", pendingCall().Expires
	}
	return d
}

var (
	callEditedArgs = json.RawMessage(`{"method":"POST","url":"https://api.example.com/v1/deploys?dry_run=true","headers":{"Content-Type":"application/json"},"timeout":30}`)

	callApproved = callWith(func(c *agent.Call) { c.Status, c.Decision = agent.Approved, decisionOf(agent.Approve, "") })
	callEdited   = callWith(func(c *agent.Call) {
		c.Status, c.EditedArgs, c.Decision = agent.Edited, callEditedArgs, decisionOf(agent.Edit, "")
		c.Decision.Args = callEditedArgs
	})
	callRejected = callWith(func(c *agent.Call) {
		c.Status, c.Decision = agent.Rejected, decisionOf(agent.Reject, "Not during the freeze — wait until Monday.")
	})
	callRejectedNoReason = callWith(func(c *agent.Call) { c.Status, c.Decision = agent.Rejected, decisionOf(agent.Reject, "") })
	callResponded        = callWith(func(c *agent.Call) {
		c.Status, c.Decision = agent.Rejected, decisionOf(agent.Respond, "use the staging cluster first")
	})
	callExpired = callWith(func(c *agent.Call) { c.Status, c.Decision = agent.Expired, decisionOf(agent.Expire, "") })
	callRunning = callWith(func(c *agent.Call) {
		c.Status, c.Attempts, c.Decision = agent.Running, 1, decisionOf(agent.Approve, "")
	})
	callAsking = callWith(func(c *agent.Call) {
		c.Status, c.Attempts, c.Decision = agent.Asking, 1, decisionOf(agent.Approve, "")
		c.Input = &agent.CallInput{Of: "U0ALICE", State: "opaque", Requests: []tools.InputRequest{
			{Key: "who", Message: "Booked for whom?", Schema: json.RawMessage(`{"type":"string"}`)},
			{Key: "room", Message: "Which room?", Schema: json.RawMessage(`{"type":"string"}`)},
		}}
	})
	callConnecting = callWith(func(c *agent.Call) {
		c.Status, c.Attempts, c.Decision = agent.Asking, 1, decisionOf(agent.Approve, "")
		c.Input = &agent.CallInput{Of: "U0ALICE", Connect: "tickets <!here>\nprod"}
	})
	callDone = callWith(func(c *agent.Call) {
		c.Status, c.Attempts, c.Decision = agent.Done, 1, decisionOf(agent.Approve, "")
		c.Result = "HTTP 201 Created\n{\"deploy\":\"d-1234\"}"
	})
	callEditedDone = callWith(func(c *agent.Call) {
		c.Status, c.Attempts, c.EditedArgs, c.Decision = agent.Done, 1, callEditedArgs, decisionOf(agent.Edit, "")
		c.Result = "Note: <@U0BOB> edited the arguments before approving; the call ran with " + string(callEditedArgs) + ".\nHTTP 202 Accepted"
	})
	callFailed = callWith(func(c *agent.Call) {
		c.Status, c.Attempts, c.IsError, c.Decision = agent.Failed, 1, true, decisionOf(agent.Approve, "")
		c.Result = "Error: Post \"https://api.example.com/v1/deploys\": dial tcp 10.0.0.7:443: connect: connection refused\nmore detail"
	})
	callUnknown = callWith(func(c *agent.Call) {
		c.Status, c.Attempts, c.Decision = agent.Unknown, 1, decisionOf(agent.Approve, "")
	})
	callRetried = callWith(func(c *agent.Call) {
		c.Status, c.Attempts, c.Decision = agent.Done, 2, decisionOf(agent.Approve, "")
		c.Result = "HTTP 201 Created"
	})
	callMarkedDone = callWith(func(c *agent.Call) {
		c.Status, c.Attempts, c.Decision = agent.Done, 1, decisionOf(agent.MarkDone, "")
		c.Result = "The call was interrupted while running; <@U0BOB> checked and marked it as done."
	})
	callSkipped = callWith(func(c *agent.Call) {
		c.Status, c.Attempts, c.IsError, c.Decision = agent.Rejected, 1, true, decisionOf(agent.Reject, "")
	})
	callNoApproval = callWith(func(c *agent.Call) {
		c.Tool, c.Args, c.NeedsApproval, c.Expires = "get_time", json.RawMessage(`{}`), false, time.Time{}
		c.Status, c.Attempts, c.Result = agent.Done, 1, "2025-03-14T09:12:00Z"
	})
)

// card is what a chat.postMessage or chat.update of a card sends.
type cardMessage struct {
	Text   string        `json:"text"`
	Blocks []slack.Block `json:"blocks"`
}

func TestCardGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		cardMessage cardMessage
	}{
		{"pending", cardMessage{slackui.CardText(pendingCall()), slackui.ApprovalCard(pendingCall(), cardAsker, cardRef, cardNow)}},
		{"unknown", cardMessage{slackui.CardText(callUnknown), slackui.ApprovalCard(callUnknown, cardAsker, cardRef, cardNow)}},
		{"approved", cardMessage{slackui.CardText(callApproved), slackui.SettledCard(callApproved, cardAsker, cardNow)}},
		{"edited", cardMessage{slackui.CardText(callEdited), slackui.SettledCard(callEdited, cardAsker, cardNow)}},
		{"edited-done", cardMessage{slackui.CardText(callEditedDone), slackui.SettledCard(callEditedDone, cardAsker, cardNow)}},
		{"rejected", cardMessage{slackui.CardText(callRejected), slackui.SettledCard(callRejected, cardAsker, cardNow)}},
		{"rejected-no-reason", cardMessage{slackui.CardText(callRejectedNoReason), slackui.SettledCard(callRejectedNoReason, cardAsker, cardNow)}},
		{"responded", cardMessage{slackui.CardText(callResponded), slackui.SettledCard(callResponded, cardAsker, cardNow)}},
		{"expired", cardMessage{slackui.CardText(callExpired), slackui.SettledCard(callExpired, cardAsker, cardNow)}},
		{"running", cardMessage{slackui.CardText(callRunning), slackui.SettledCard(callRunning, cardAsker, cardNow)}},
		{"asking", cardMessage{slackui.CardText(callAsking), slackui.SettledCard(callAsking, cardAsker, cardNow)}},
		{"connecting", cardMessage{slackui.CardText(callConnecting), slackui.SettledCard(callConnecting, cardAsker, cardNow)}},
		{"done", cardMessage{slackui.CardText(callDone), slackui.SettledCard(callDone, cardAsker, cardNow)}},
		{"failed", cardMessage{slackui.CardText(callFailed), slackui.SettledCard(callFailed, cardAsker, cardNow)}},
		{"retried", cardMessage{slackui.CardText(callRetried), slackui.SettledCard(callRetried, cardAsker, cardNow)}},
		{"marked-done", cardMessage{slackui.CardText(callMarkedDone), slackui.SettledCard(callMarkedDone, cardAsker, cardNow)}},
		{"skipped", cardMessage{slackui.CardText(callSkipped), slackui.SettledCard(callSkipped, cardAsker, cardNow)}},
		{"no-approval", cardMessage{slackui.CardText(callNoApproval), slackui.SettledCard(callNoApproval, cardAsker, cardNow)}},
		{"error", cardMessage{slackui.TextRunFailed, slackui.ErrorCard("llm: openai: 503 Service Unavailable after 5 attempts", cardRef)}},
		{"error-final", cardMessage{slackui.TextRunFailed, slackui.FinalErrorCard("the model failed: this conversation no longer fits in the model's context window: start a new thread to go on (HTTP 400: This model's maximum context length is 128000 tokens.) (gpt-4o)")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			compareGolden(t, "card-"+tt.name, tt.cardMessage)
			checkMessage(t, tt.cardMessage.Blocks)
		})
	}
}

func TestModalGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		view slack.ModalViewRequest
	}{
		{"edit", slackui.EditModal(pendingCall(), cardRef)},
		{"edit-too-long", slackui.EditModal(callWith(func(c *agent.Call) { c.Args = hugeArgs(100_000, "x") }), cardRef)},
		{"reject", slackui.RejectModal(pendingCall(), cardRef)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			compareGolden(t, "modal-"+tt.name, tt.view)
			checkModal(t, tt.view)
		})
	}
}

// checkGolden compares v's JSON with testdata/<name>.golden.json, or
// rewrites the file with -update.
func compareGolden(t *testing.T, name string, v any) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep <@U…> and &amp; readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatalf("json.Marshal(%s) = %v", name, err)
	}
	got := buf.Bytes()
	path := filepath.Join("testdata", name+".golden.json")
	if updateGolden() {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the tests with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s (run with -update if the change is intended):\n%s", name, path, got)
	}
}

type cardButton struct{ actionID, text, style string }

func buttonsOf(t *testing.T, blocks []slack.Block) (buttons []cardButton, values []string) {
	t.Helper()
	for _, b := range blocks {
		a, ok := b.(*slack.ActionBlock)
		if !ok {
			continue
		}
		for _, e := range a.Elements.ElementSet {
			btn, ok := e.(*slack.ButtonBlockElement)
			if !ok {
				t.Fatalf("actions element %T, want a button", e)
			}
			buttons = append(buttons, cardButton{btn.ActionID, btn.Text.Text, string(btn.Style)})
			values = append(values, btn.Value)
		}
	}
	return buttons, values
}

// TestCardButtons pins the buttons' action IDs and texts, which
// docs/architecture.md (Contracts) makes a contract.
func TestCardButtons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		blocks []slack.Block
		want   []cardButton
	}{
		{"pending", slackui.ApprovalCard(pendingCall(), cardAsker, cardRef, cardNow), []cardButton{
			{"approve", "Approve", "primary"}, {"edit", "Edit", ""}, {"reject", "Reject", "danger"},
		}},
		{"unknown", slackui.ApprovalCard(callUnknown, cardAsker, cardRef, cardNow), []cardButton{
			{"retry", "Retry", "primary"}, {"mark_done", "Mark done", ""}, {"skip", "Skip", "danger"},
		}},
		{"error", slackui.ErrorCard("boom", cardRef), []cardButton{{"retry_run", "Retry", "primary"}}},
		{"error a retry cannot fix", slackui.FinalErrorCard("boom"), nil},
		{"approved", slackui.SettledCard(callApproved, cardAsker, cardNow), nil},
		{"edited", slackui.SettledCard(callEdited, cardAsker, cardNow), nil},
		{"rejected", slackui.SettledCard(callRejected, cardAsker, cardNow), nil},
		{"expired", slackui.SettledCard(callExpired, cardAsker, cardNow), nil},
		{"running", slackui.SettledCard(callRunning, cardAsker, cardNow), nil},
		{"done", slackui.SettledCard(callDone, cardAsker, cardNow), nil},
		{"failed", slackui.SettledCard(callFailed, cardAsker, cardNow), nil},
		{"skipped", slackui.SettledCard(callSkipped, cardAsker, cardNow), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, values := buttonsOf(t, tt.blocks)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("buttons = %v, want %v", got, tt.want)
			}
			for _, v := range values {
				if v != cardRef {
					t.Errorf("button value = %q, want %q", v, cardRef)
				}
			}
		})
	}
	if slackui.ActionApprove != "approve" || slackui.ActionEdit != "edit" || slackui.ActionReject != "reject" {
		t.Errorf("approval action IDs = %q, %q, %q, want approve, edit, reject", slackui.ActionApprove, slackui.ActionEdit, slackui.ActionReject)
	}
}

func TestSettledCardStatus(t *testing.T) {
	t.Parallel()
	at := fmt.Sprintf("at <!date^%d^", cardDecided.Unix())
	tests := []struct {
		name    string
		call    agent.Call
		want    []string
		notWant []string
	}{
		{"approved", callApproved, []string{"✅ Approved by <@U0BOB> " + at}, []string{"Running", "Done"}},
		{"edited", callEdited, []string{"✏️ Edited and approved by <@U0BOB> " + at}, nil},
		{"rejected", callRejected, []string{"🚫 Rejected by <@U0BOB> " + at, "UTC>: Not during the freeze — wait until Monday."}, nil},
		{"rejected without reason", callRejectedNoReason, []string{"🚫 Rejected by <@U0BOB> " + at}, []string{"UTC>:"}},
		{"responded", callResponded, []string{"Rejected by <@U0BOB> " + at, "use the staging cluster first"}, nil},
		{"expired", callExpired, []string{"⌛ Expired — nobody decided in time"}, []string{"<@U0BOB>"}},
		{"running", callRunning, []string{"✅ Approved by", "⏳ Running…"}, nil},
		{"asking", callAsking, []string{"✅ Approved by <@U0BOB> " + at, "✋ Waiting for <@U0ALICE>'s answers to the server's questions"}, []string{"Running", "Retry", "opaque"}},
		{"asking one question", callWith(func(c *agent.Call) {
			c.Status, c.Attempts, c.Decision = agent.Asking, 2, decisionOf(agent.Approve, "")
			c.Input = &agent.CallInput{Of: "U0ALICE", Requests: []tools.InputRequest{{Key: "who", Message: "Booked for whom?"}}}
		}), []string{"✋ Waiting for <@U0ALICE>'s answer to the server's question"}, []string{"Running", "Booked for whom?"}},
		{"waiting for a connection", callConnecting, []string{"🔌 Waiting for <@U0ALICE> to connect to tickets &lt;!here&gt; prod"}, []string{"Running", "<!here>"}},
		{"done", callDone, []string{"✔️ Done: HTTP 201 Created"}, []string{"d-1234"}},
		{"done after an edit", callEditedDone, []string{"✔️ Done: HTTP 202 Accepted"}, []string{"Note:"}},
		{"failed", callFailed, []string{"❌ Failed: Post \"https://api.example.com/v1/deploys\": dial tcp 10.0.0.7:443: connect: connection refused"}, []string{"more detail", "Error:"}},
		{"retried", callRetried, []string{"🔁 Retry approved by <@U0BOB>", "✔️ Done: HTTP 201 Created"}, []string{"✅"}},
		{"marked done", callMarkedDone, []string{"☑️ Marked done by <@U0BOB> " + at}, []string{"✔️"}},
		{"skipped", callSkipped, []string{"⏭️ Skipped by <@U0BOB> " + at}, []string{"Rejected"}},
		{"no approval needed", callNoApproval, []string{"without approval", "✔️ Done: 2025-03-14T09:12:00Z"}, nil},
		{"decision without a time", callWith(func(c *agent.Call) {
			c.Status, c.Decision = agent.Approved, decisionOf(agent.Approve, "")
			c.Decision.At = time.Time{}
		}), []string{fmt.Sprintf("✅ Approved by <@U0BOB> at <!date^%d^", cardNow.Unix())}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slackuitest.Texts(t, slackui.SettledCard(tt.call, cardAsker, cardNow))
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("SettledCard() texts lack %q:\n%s", w, got)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("SettledCard() texts contain %q:\n%s", w, got)
				}
			}
		})
	}
}

// whatChanged returns the code in a settled card's "What changed" section.
func whatChanged(t *testing.T, blocks []slack.Block) string {
	t.Helper()
	for _, b := range blocks {
		if s, ok := b.(*slack.SectionBlock); ok && s.Text != nil {
			if rest, ok := strings.CutPrefix(s.Text.Text, "*What changed*\n```\n"); ok {
				return strings.TrimSuffix(rest, "\n```")
			}
		}
	}
	t.Fatalf("no What changed section")
	return ""
}

func TestSettledCardDiff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		args, edited string
		want         string
	}{
		{"added, removed, changed", `{"a":1,"b":"x","c":[1,2]}`, `{"a":1,"b":"y","d":true}`,
			"~ \"b\": \"x\" → \"y\"\n- \"c\"\n+ \"d\": true"},
		{"key order and spacing do not count", `{"h":{"x":1,"y":2}}`, `{ "h" : { "y":2, "x":1 } }`, "no changes"},
		{"same arguments", `{"a":1}`, `{"a":1}`, "no changes"},
		{"big numbers compared exactly", `{"n":12345678901234567890}`, `{"n":12345678901234567891}`,
			"~ \"n\": 12345678901234567890 → 12345678901234567891"},
		{"not objects", `[1,2]`, `[1,3]`, "~ [1,2] → [1,3]"},
		{"markup escaped", `{"u":"<a>"}`, `{"u":"<!channel>"}`, "~ \"u\": \"&lt;a&gt;\" → \"&lt;!channel&gt;\""},
		// A change at the end of a long value is shown, not cut off
		// with the rest: both sides from a little before it.
		{"change past the cut", `{"cmd":"` + strings.Repeat("a", 400) + `; echo ok"}`, `{"cmd":"` + strings.Repeat("a", 400) + `; rm -rf /"}`,
			"~ \"cmd\": …" + strings.Repeat("a", 38) + "; echo ok\" → …" + strings.Repeat("a", 38) + "; rm -rf /\""},
		{"short values whole", `{"v":"` + strings.Repeat("c", 280) + `x"}`, `{"v":"` + strings.Repeat("c", 280) + `y"}`,
			"~ \"v\": \"" + strings.Repeat("c", 280) + "x\" → \"" + strings.Repeat("c", 280) + "y\""},
		{"whole values, change past the cut", `["` + strings.Repeat("b", 400) + `x"]`, `["` + strings.Repeat("b", 400) + `y"]`,
			"~ …" + strings.Repeat("b", 40) + "x\"] → …" + strings.Repeat("b", 40) + "y\"]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := callWith(func(c *agent.Call) {
				c.Args, c.EditedArgs = json.RawMessage(tt.args), json.RawMessage(tt.edited)
				c.Status, c.Decision = agent.Edited, decisionOf(agent.Edit, "")
			})
			if got := whatChanged(t, slackui.SettledCard(c, cardAsker, cardNow)); got != tt.want {
				t.Errorf("What changed = %q, want %q", got, tt.want)
			}
		})
	}
	many := map[string]int{}
	for i := range 500 {
		many[fmt.Sprintf("key_%03d", i)] = i
	}
	before, _ := json.Marshal(many)
	c := callWith(func(c *agent.Call) {
		c.Args, c.EditedArgs = before, json.RawMessage(`{}`)
		c.Status, c.Decision = agent.Edited, decisionOf(agent.Edit, "")
	})
	got := whatChanged(t, slackui.SettledCard(c, cardAsker, cardNow))
	if !strings.HasPrefix(got, `- "key_000"`) || !regexp.MustCompile(`… and \d+ more$`).MatchString(got) {
		t.Errorf("What changed of 500 removals = %q, want the first ones and a count of the rest", got)
	}
}

func TestApprovalCardContent(t *testing.T) {
	t.Parallel()
	c := pendingCall()
	got := slackuitest.Texts(t, slackui.ApprovalCard(c, cardAsker, cardRef, cardNow))
	for _, w := range []string{
		"Approval needed: http_request",
		"<@U0ASKER>",
		"POST https://api.example.com/v1/deploys",
		"sha256:" + tools.ShortHash(c.RunHash()),
		"You asked to deploy billing 2.4.1 &amp; to notify &lt;#ops&gt;",
		fmt.Sprintf("<!date^%d^{date_short_pretty} at {time}|Mar 15, 2025 09:00 UTC> (in 24h)", cardNow.Add(24*time.Hour).Unix()),
	} {
		if !strings.Contains(got, w) {
			t.Errorf("ApprovalCard() texts lack %q:\n%s", w, got)
		}
	}
}

func TestCardText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		call agent.Call
		want string
	}{
		{pendingCall(), "Approval needed: http_request"},
		{callUnknown, "Outcome unknown: http_request"},
		{callApproved, "http_request: approved"},
		{callEdited, "http_request: edited and approved"},
		{callRejected, "http_request: rejected"},
		{callSkipped, "http_request: skipped"},
		{callExpired, "http_request: expired"},
		{callRunning, "http_request: running"},
		{callAsking, "http_request: waiting for input"},
		{callConnecting, "http_request: waiting for a connection"},
		{callDone, "http_request: done"},
		{callMarkedDone, "http_request: marked done"},
		{callFailed, "http_request: failed"},
		{callWith(func(c *agent.Call) { c.Tool = "<!channel>" }), "Approval needed: &lt;!channel&gt;"},
		// Decided while pending, as the card shows it before the run
		// goes on (an expiry is never followed by a run).
		{callWith(func(c *agent.Call) { c.Decision = &agent.Decision{Kind: agent.Expire} }), "http_request: expired"},
	}
	for _, tt := range tests {
		if got := slackui.CardText(tt.call); got != tt.want {
			t.Errorf("CardText(%s %s) = %q, want %q", tt.call.Tool, tt.call.Status, got, tt.want)
		}
	}
}

func TestEditModal(t *testing.T) {
	t.Parallel()
	compactOnly := map[string]string{}
	for i := range 120 {
		compactOnly[fmt.Sprintf("key%03d", i)] = "value"
	}
	compactArgs, _ := json.Marshal(compactOnly)
	tests := []struct {
		name      string
		call      agent.Call
		wantInput bool
		wantArgs  json.RawMessage
	}{
		{"pending", pendingCall(), true, pendingCall().Args},
		{"edited arguments are the ones shown", callWith(func(c *agent.Call) { c.EditedArgs = callEditedArgs }), true, callEditedArgs},
		{"no arguments", callWith(func(c *agent.Call) { c.Args = nil }), true, json.RawMessage(`{}`)},
		{"too long pretty, fits compact", callWith(func(c *agent.Call) { c.Args = compactArgs }), true, compactArgs},
		{"too long", callWith(func(c *agent.Call) { c.Args = hugeArgs(5000, "x") }), false, nil},
		{"too long in UTF-16", callWith(func(c *agent.Call) { c.Args = hugeArgs(2000, "🙂") }), false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			view := slackui.EditModal(tt.call, cardRef)
			checkModal(t, view)
			if view.CallbackID != "edit_call" || view.PrivateMetadata != cardRef || view.Title.Text != "Edit arguments" {
				t.Errorf("EditModal() callback %q, metadata %q, title %q", view.CallbackID, view.PrivateMetadata, view.Title.Text)
			}
			inputs := inputsOf(view)
			if !tt.wantInput {
				if len(inputs) != 0 || view.Submit != nil {
					t.Fatalf("EditModal(too long) has %d inputs and submit %v, want none", len(inputs), view.Submit)
				}
				if got := slackuitest.Texts(t, view); !strings.Contains(got, "cannot be edited here") || !strings.Contains(got, "http_request") {
					t.Errorf("EditModal(too long) does not explain why:\n%s", got)
				}
				return
			}
			if len(inputs) != 1 {
				t.Fatalf("EditModal() has %d input blocks, want 1", len(inputs))
			}
			in := inputs[0]
			el, ok := in.Element.(*slack.PlainTextInputBlockElement)
			if !ok {
				t.Fatalf("input element %T, want plain_text_input", in.Element)
			}
			if in.BlockID != "args" || el.ActionID != "args_input" || !el.Multiline || in.Optional {
				t.Errorf("input block %q action %q multiline %v optional %v, want args, args_input, true, false", in.BlockID, el.ActionID, el.Multiline, in.Optional)
			}
			if view.Submit == nil || view.Submit.Text != "Approve" || view.Close.Text != "Cancel" {
				t.Errorf("EditModal() submit %v close %v, want Approve, Cancel", view.Submit, view.Close)
			}
			if !sameJSON(t, json.RawMessage(el.InitialValue), tt.wantArgs) {
				t.Errorf("initial value %s, want the JSON %s", el.InitialValue, tt.wantArgs)
			}
		})
	}
}

func TestRejectModal(t *testing.T) {
	t.Parallel()
	view := slackui.RejectModal(pendingCall(), cardRef)
	checkModal(t, view)
	if view.CallbackID != "reject_call" || view.PrivateMetadata != cardRef || view.Title.Text != "Reject call" ||
		view.Submit.Text != "Reject" || view.Close.Text != "Cancel" {
		t.Errorf("RejectModal() callback %q metadata %q title %q submit %q close %q", view.CallbackID, view.PrivateMetadata, view.Title.Text, view.Submit.Text, view.Close.Text)
	}
	inputs := inputsOf(view)
	if len(inputs) != 1 {
		t.Fatalf("RejectModal() has %d input blocks, want 1", len(inputs))
	}
	el := inputs[0].Element.(*slack.PlainTextInputBlockElement)
	if inputs[0].BlockID != "reason" || el.ActionID != "reason_input" || !el.Multiline || !inputs[0].Optional || el.MaxLength != 2000 {
		t.Errorf("input block %q action %q multiline %v optional %v max %d, want reason, reason_input, true, true, 2000",
			inputs[0].BlockID, el.ActionID, el.Multiline, inputs[0].Optional, el.MaxLength)
	}
}

func inputsOf(view slack.ModalViewRequest) []*slack.InputBlock {
	var out []*slack.InputBlock
	for _, b := range view.Blocks.BlockSet {
		if in, ok := b.(*slack.InputBlock); ok {
			out = append(out, in)
		}
	}
	return out
}

func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("not JSON: %v: %s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// hugeArgs is a JSON object of about n characters, its string values made
// of unit.
func hugeArgs(n int, unit string) json.RawMessage {
	m := map[string]string{}
	per := max(1, 400/utf8.RuneCountInString(unit))
	for i := 0; i*400 < n; i++ {
		m[fmt.Sprintf("field_%04d", i)] = strings.Repeat(unit, per)
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// TestCardLimits renders every card and modal from hostile input — 100 KB
// of arguments, multibyte text, characters Slack escapes, backticks,
// invalid UTF-8, absurdly long names — and checks each against Slack's
// limits.
func TestCardLimits(t *testing.T) {
	t.Parallel()
	long := func(unit string, n int) string { return strings.Repeat(unit, n) }
	args := map[string]json.RawMessage{
		"ascii":       hugeArgs(100_000, "x"),
		"multibyte":   hugeArgs(100_000, "日本語テキスト🙂é"),
		"escapes":     hugeArgs(100_000, "<&>"),
		"backticks":   hugeArgs(100_000, "`"),
		"array":       json.RawMessage("[" + strings.Repeat(`"🙂🙂🙂🙂",`, 20_000) + `"end"]`),
		"not json":    json.RawMessage(long("```<!channel>", 10_000)),
		"invalid utf": json.RawMessage("{\"a\":\"" + long("\xff\xfe", 50_000) + "\"}"),
	}
	reason := long("Because <!here> & ``` 🙂\n", 5_000)
	for name, a := range args {
		t.Run(name, func(t *testing.T) {
			big := func(fn func(c *agent.Call)) agent.Call {
				c := callWith(func(c *agent.Call) {
					c.Tool = long("tool_🙂", 100)
					c.Args = a
					c.Reason = reason
				})
				fn(&c)
				return c
			}
			calls := map[string]agent.Call{
				"pending":  big(func(*agent.Call) {}),
				"unknown":  big(func(c *agent.Call) { c.Status, c.Attempts = agent.Unknown, 1 }),
				"rejected": big(func(c *agent.Call) { c.Status, c.Decision = agent.Rejected, decisionOf(agent.Reject, reason) }),
				"edited": big(func(c *agent.Call) {
					c.Status, c.EditedArgs, c.Decision = agent.Edited, hugeArgs(100_000, "é<"), decisionOf(agent.Edit, "")
				}),
				"edited whole": big(func(c *agent.Call) {
					c.Status, c.EditedArgs, c.Decision = agent.Edited, json.RawMessage(`"`+long("`", 5000)+`"`), decisionOf(agent.Edit, "")
				}),
				"done":   big(func(c *agent.Call) { c.Status, c.Attempts, c.Result = agent.Done, 1, long("🙂<", 100_000) }),
				"failed": big(func(c *agent.Call) { c.Status, c.Attempts, c.Result = agent.Failed, 1, "Error: "+long("&", 100_000) }),
			}
			// The windows show the call's tool and the arguments it runs
			// with, nothing of its status: each is checked once for each
			// set of arguments a call here runs with (its own, or an
			// edit's), not again for every status with the same ones.
			checked := map[string]bool{}
			once := func(window string, c agent.Call) bool {
				key := window + "\x00" + c.Tool + "\x00" + string(c.RunArgs())
				if checked[key] {
					return false
				}
				checked[key] = true
				return true
			}
			for cname, c := range calls {
				t.Run(cname, func(t *testing.T) {
					requester := long("<!channel>", 100)
					if c.Status.Waiting() {
						blocks := slackui.ApprovalCard(c, requester, cardRef, cardNow)
						checkMessage(t, blocks)
						if got := slackuitest.Texts(t, blocks); !strings.Contains(got, "Show all") {
							t.Errorf("ApprovalCard() of shortened arguments offers no Show all")
						}
						if once("Show all", c) {
							checkModal(t, slackui.ArgsModal(c))
						}
					}
					checkMessage(t, slackui.SettledCard(c, requester, cardNow))
					checkText(t, "CardText", slackui.CardText(c), 3000, "mrkdwn")
					if once("edit", c) {
						checkModal(t, slackui.EditModal(c, cardRef))
					}
					if once("reject", c) {
						checkModal(t, slackui.RejectModal(c, cardRef))
					}
				})
			}
		})
	}
	t.Run("error card", func(t *testing.T) {
		checkMessage(t, slackui.ErrorCard(long("<!channel> ``` 🙂 &", 50_000), cardRef))
		checkMessage(t, slackui.FinalErrorCard(long("<!channel> ``` 🙂 &", 50_000)))
	})
}

// Patterns of the mrkdwn the cards mean to send: user mentions, dates and
// quotes.
// Any other < or > in a text came from the input unescaped.
var allowedMarkup = regexp.MustCompile(`(?m)<@[A-Z0-9]+>|<!subteam\^S[A-Z0-9]+>|<!date\^\d+\^[^|<>]+\|[^<>]+>|^> `)

// checkMessage checks a card against Slack's limits for a message.
func checkMessage(t *testing.T, blocks []slack.Block) {
	t.Helper()
	if len(blocks) == 0 || len(blocks) > 50 {
		t.Fatalf("%d blocks, want 1 to 50", len(blocks))
	}
	raw, err := json.Marshal(blocks)
	if err != nil {
		t.Fatalf("json.Marshal(blocks) = %v", err)
	}
	checkBlocksJSON(t, raw)
}

// checkModal checks a modal against Slack's limits for a view.
func checkModal(t *testing.T, view slack.ModalViewRequest) {
	t.Helper()
	if view.Type != slack.VTModal {
		t.Errorf("view type %q, want modal", view.Type)
	}
	for name, text := range map[string]*slack.TextBlockObject{"title": view.Title, "submit": view.Submit, "close": view.Close} {
		if text == nil {
			if name == "title" {
				t.Errorf("modal has no title")
			}
			continue
		}
		checkText(t, "modal "+name, text.Text, 24, text.Type)
	}
	if n := len(view.Blocks.BlockSet); n == 0 || n > 100 {
		t.Errorf("modal has %d blocks, want 1 to 100", n)
	}
	checkText(t, "private_metadata", view.PrivateMetadata, 3000, "")
	raw, err := json.Marshal(view)
	if err != nil {
		t.Fatalf("json.Marshal(view) = %v", err)
	}
	var generic struct{ Blocks json.RawMessage }
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	checkBlocksJSON(t, generic.Blocks)
}

// checkBlocksJSON checks marshalled blocks against Slack's limits.
func checkBlocksJSON(t *testing.T, raw []byte) {
	t.Helper()
	if !utf8.Valid(raw) {
		t.Errorf("blocks are not valid UTF-8")
	}
	var blocks []map[string]any
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatalf("blocks do not unmarshal: %v", err)
	}
	var back slack.Blocks
	if err := json.Unmarshal(raw, &back); err != nil || len(back.BlockSet) != len(blocks) {
		t.Fatalf("slack.Blocks does not unmarshal the blocks: %v", err)
	}
	text := func(where string, v any, limit int) {
		obj, ok := v.(map[string]any)
		if !ok {
			t.Errorf("%s: %v is not a text object", where, v)
			return
		}
		typ, _ := obj["type"].(string)
		s, _ := obj["text"].(string)
		checkText(t, where, s, limit, typ)
		if s == "" {
			t.Errorf("%s: empty text", where)
		}
	}
	for i, b := range blocks {
		where := fmt.Sprintf("block %d (%s)", i, b["type"])
		if id, _ := b["block_id"].(string); len(id) > 255 {
			t.Errorf("%s: block_id of %d characters", where, len(id))
		}
		switch b["type"] {
		case "header":
			text(where+" text", b["text"], 150)
		case "section":
			if b["text"] != nil {
				text(where+" text", b["text"], 3000)
			}
			fields, _ := b["fields"].([]any)
			if len(fields) > 10 {
				t.Errorf("%s: %d fields", where, len(fields))
			}
			for j, f := range fields {
				text(fmt.Sprintf("%s field %d", where, j), f, 2000)
			}
		case "context":
			elements, _ := b["elements"].([]any)
			if len(elements) == 0 || len(elements) > 10 {
				t.Errorf("%s: %d elements", where, len(elements))
			}
			for j, e := range elements {
				text(fmt.Sprintf("%s element %d", where, j), e, 3000)
			}
		case "actions":
			elements, _ := b["elements"].([]any)
			if len(elements) == 0 || len(elements) > 25 {
				t.Errorf("%s: %d elements", where, len(elements))
			}
			for j, e := range elements {
				btn := e.(map[string]any)
				bw := fmt.Sprintf("%s button %d", where, j)
				text(bw+" text", btn["text"], 75)
				if id, _ := btn["action_id"].(string); id == "" || len(id) > 255 {
					t.Errorf("%s: action_id %q", bw, id)
				}
				if v, _ := btn["value"].(string); len(v) > 2000 {
					t.Errorf("%s: value of %d bytes", bw, len(v))
				}
				if c, ok := btn["confirm"].(map[string]any); ok {
					text(bw+" confirm title", c["title"], 100)
					text(bw+" confirm text", c["text"], 300)
					text(bw+" confirm confirm", c["confirm"], 30)
					text(bw+" confirm deny", c["deny"], 30)
				}
			}
		case "input":
			text(where+" label", b["label"], 2000)
			if b["hint"] != nil {
				text(where+" hint", b["hint"], 2000)
			}
			el := b["element"].(map[string]any)
			if el["placeholder"] != nil {
				text(where+" placeholder", el["placeholder"], 150)
			}
			maxLen, _ := el["max_length"].(float64)
			if maxLen <= 0 || maxLen > 3000 {
				t.Errorf("%s: max_length %v, want 1 to 3000", where, maxLen)
			}
			initial, _ := el["initial_value"].(string)
			checkText(t, where+" initial_value", initial, int(maxLen), "")
		default:
			t.Errorf("%s: unexpected block type", where)
		}
	}
}

// checkText checks one text against a limit, measured both in Unicode
// characters and in UTF-16 code units; mrkdwn must also keep its code
// fences balanced and carry no markup other than mentions and dates.
func checkText(t *testing.T, where, s string, limit int, typ string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Errorf("%s: invalid UTF-8", where)
	}
	if n := utf8.RuneCountInString(s); n > limit {
		t.Errorf("%s: %d characters, limit %d", where, n, limit)
	}
	if n := len(utf16.Encode([]rune(s))); n > limit {
		t.Errorf("%s: %d UTF-16 code units, limit %d", where, n, limit)
	}
	if typ != "mrkdwn" {
		return
	}
	if n := strings.Count(s, "```"); n%2 != 0 {
		t.Errorf("%s: %d code fences, want an even number:\n%.300s", where, n, s)
	}
	if rest := allowedMarkup.ReplaceAllString(s, ""); strings.ContainsAny(rest, "<>") {
		i := strings.IndexAny(rest, "<>")
		t.Errorf("%s: unescaped markup near %q", where, rest[max(0, i-20):min(len(rest), i+20)])
	}
}

// TestCardNeverHidesTheRequest: however long or hostile the arguments,
// the method and every character of the URL are on the card; a Unicode
// host is shown as the punycode that is dialled, with its Unicode form.
func TestCardNeverHidesTheRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url string
		want      []string
	}{
		{"long URL of escapes", "https://api.example.com/?q=" + strings.Repeat("&<>", 680), []string{strings.Repeat("&amp;&lt;&gt;", 680)}},
		{"backticks and markup", "https://api.example.com/``` *b* <!here>", []string{"https://api.example.com/`\u200b`\u200b` *b* &lt;!here&gt;"}},
		{"Unicode host", "https://пример.испытание/x", []string{"https://xn--e1afmkfd.xn--80akhbyknj4f/x", "пример.испытание"}},
		{"homograph in punycode", "https://xn--pple-43d.com/login", []string{"https://xn--pple-43d.com/login", "аpple.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, _ := json.Marshal(map[string]any{"method": "DELETE", "url": tt.url, "body": strings.Repeat("x", 10_000),
				"headers": map[string]string{"X-Long": strings.Repeat("y", 5000)}})
			c := callWith(func(c *agent.Call) { c.Args = args })
			blocks := slackui.ApprovalCard(c, cardAsker, cardRef, cardNow)
			checkMessage(t, blocks)
			got := strings.ReplaceAll(slackuitest.Texts(t, blocks), "\n```\n_(continued)_\n```\n", "")
			for _, w := range append(tt.want, "DELETE", "Show all", "more characters") {
				if !strings.Contains(got, w) {
					t.Errorf("the card lacks %.100q:\n%.600s", w, got)
				}
			}
			modal := slackui.ArgsModal(c)
			checkModal(t, modal)
			if all := slackuitest.Texts(t, modal); strings.Count(all, "x") < 10_000 || strings.Count(all, "y") < 5000 {
				t.Errorf("Show all does not show every character of the body and headers")
			}
		})
	}
}

// TestShowAllShowsTheLongestArguments: the longest arguments a call may
// have, made of characters Slack escapes, still fit the Show all window
// whole.
func TestShowAllShowsTheLongestArguments(t *testing.T) {
	t.Parallel()
	worst := `{"body":"` + strings.Repeat("&", tools.MaxArgsLen-20) + `"}`
	nested := strings.Repeat("[", 31) + strings.Repeat("0,", tools.MaxArgsLen/2-40) + "0" + strings.Repeat("]", 31)
	for name, args := range map[string]string{"escapes": worst, "deep and wide": nested} {
		canonical, err := tools.Canonical([]byte(args))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := callWith(func(c *agent.Call) { c.Tool, c.Args = "other", canonical })
		modal := slackui.ArgsModal(c)
		checkModal(t, modal)
		if got := slackuitest.Texts(t, modal); strings.Contains(got, "longer than a Slack window holds") {
			t.Errorf("%s: Show all cannot show the arguments", name)
		}
	}
}
