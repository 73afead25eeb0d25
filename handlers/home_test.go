package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/slackui/slackuitest"
)

// homeTeamURL is the workspace URL the gate's Home tab links threads to.
const homeTeamURL = "https://countersign-test.slack.com/"

// homeGate is the gate with the Home tab on: U0BOB may approve deploy,
// U0ALICE asks.
func newHomeGate(tb testing.TB) *gate { return buildGate(tb, true) }

// homeOf returns user's last published Home view: its text, and its
// Approve buttons' values.
func homeOf(t *testing.T, g *gate, user string) (string, []string) {
	t.Helper()
	c, ok := g.slack.HomeView(user)
	if !ok {
		t.Fatalf("no Home tab published for %s", user)
	}
	var blocks slack.Blocks
	if err := json.Unmarshal(c.Blocks, &blocks); err != nil {
		t.Fatal(err)
	}
	var approve []string
	buttons, values := buttonsOf(t, blocks.BlockSet)
	for i, b := range buttons {
		if b.actionID == slackui.ActionApprove {
			approve = append(approve, values[i])
		}
	}
	return slackuitest.Texts(t, blocks.BlockSet), approve
}

// TestHomeTab: opening the Home tab shows the approver the call with the
// card's buttons, and shows nothing to someone else or to the requester
// (who may not approve their own request). A click there by someone else,
// with the card's value, is refused and says why; the approver's click
// decides, runs the tool once, updates the card, and the approver's tab
// shows the call among their recent decisions instead.
func TestHomeTab(t *testing.T) {
	t.Parallel()
	g := newHomeGate(t)
	thread, value := g.pending(t)
	for _, user := range []string{gateApprover, gateRequester, "U0MALLORY"} {
		if code, _ := g.post(t, "/slack/events", "application/json", slacktest.AppHomeOpened("", user)); code != 200 {
			t.Fatalf("app_home_opened = %d", code)
		}
	}
	text, approve := homeOf(t, g, gateApprover)
	if !slices.Equal(approve, []string{value}) || !strings.Contains(text, "Approval needed:* `deploy`") {
		t.Fatalf("the approver's Home tab has Approve buttons %v, want the card's %q:\n%s", approve, value, text)
	}
	for _, user := range []string{gateRequester, "U0MALLORY"} {
		if text, approve := homeOf(t, g, user); len(approve) != 0 || !strings.Contains(text, "Nothing waits for you") {
			t.Errorf("%s's Home tab has Approve buttons %v:\n%s", user, approve, text)
		}
	}

	forged := slacktest.BlockActions(slacktest.Click{Home: true, User: "U0MALLORY", ActionID: slackui.ActionApprove, Value: value})
	if code, _ := g.post(t, "/slack/interactions", "application/x-www-form-urlencoded", forged); code != 200 {
		t.Fatalf("the forged click = %d", code)
	}
	if text, _ := homeOf(t, g, "U0MALLORY"); !strings.Contains(text, "You can't decide this call: only <@U0BOB> may approve this call") {
		t.Errorf("the refused clicker's Home tab does not say why:\n%s", text)
	}
	g.check(t, thread, 0, false)
	if runs := g.tool.Runs(); len(runs) != 0 {
		t.Fatalf("the tool ran %d times after a refused click", len(runs))
	}

	click := slacktest.BlockActions(slacktest.Click{Home: true, User: gateApprover, ActionID: slackui.ActionApprove, Value: value})
	if code, _ := g.post(t, "/slack/interactions", "application/x-www-form-urlencoded", click); code != 200 {
		t.Fatalf("the approver's click = %d", code)
	}
	g.check(t, thread, 0, true)
	if runs := g.tool.Runs(); len(runs) != 1 {
		t.Errorf("the tool ran %d times, want 1", len(runs))
	}
	text, approve = homeOf(t, g, gateApprover)
	if len(approve) != 0 || !strings.Contains(text, "✅ Approved `deploy` in <#"+slacktest.ChannelID+">") {
		t.Errorf("the approver's Home tab after the approval has Approve buttons %v:\n%s", approve, text)
	}
	card := g.slack.Messages(slacktest.ChannelID, strings.Split(thread, ":")[2])
	c, _ := g.slack.Message(slacktest.ChannelID, card[0].TS)
	var blocks slack.Blocks
	_ = json.Unmarshal(c.Blocks, &blocks)
	if text := slackuitest.Texts(t, blocks.BlockSet); !strings.Contains(text, "Approved by <@U0BOB>") {
		t.Errorf("the card after the approval from the Home tab:\n%s", text)
	}
}

// FuzzHomeDecisionPath sends signed clicks and modal submissions from the
// Home tab — by anyone, with any reference and any edited arguments —
// against a real pending card, and holds the gate to its promises: only
// the approver decides, and only what was approved runs.
func FuzzHomeDecisionPath(f *testing.F) {
	f.Add(uint8(1), "", "approve", true, "", false, "", "")
	f.Add(uint8(2), "", "approve", true, "", false, "", "")
	f.Add(uint8(0), "", "approve", true, "", false, "", "")
	f.Add(uint8(2), "", "reject", true, "", true, "", "no")
	f.Add(uint8(2), "", "edit", true, "", true, `{"n": 2}`, "")
	f.Add(uint8(1), "", "edit", true, "", true, `{"n": 3}`, "")
	f.Add(uint8(0), "", "reject", true, "", true, "", "withdrawn")
	f.Add(uint8(3), "W0BOB", "mark_done", false, "0123456789abcdef01234567", false, "", "")
	g := newHomeGate(f)
	users := []string{gateRequester, gateApprover, "U0MALLORY"}
	f.Fuzz(func(t *testing.T, userSel uint8, userRaw, action string, realValue bool, valueRaw string, submit bool, args, reason string) {
		thread, value := g.pending(t)
		runsBefore := len(g.tool.Runs())
		user := userRaw
		if int(userSel) < len(users) {
			user = users[userSel]
		}
		if user == "" {
			return
		}
		if !realValue {
			value = valueRaw
		}
		var body []byte
		if submit {
			callback := slackui.CallbackReject
			if action == slackui.ActionEdit {
				callback = slackui.CallbackEdit
			}
			body = slacktest.ViewSubmission(slacktest.Submission{User: user, CallbackID: callback, PrivateMetadata: "home:" + value,
				Values: map[string]map[string]string{
					slackui.BlockArgs:   {slackui.InputArgs: args},
					slackui.BlockReason: {slackui.InputReason: reason},
				}})
		} else {
			body = slacktest.BlockActions(slacktest.Click{Home: true, User: user, ActionID: action, Value: value})
		}
		g.send(t, body)
		g.send(t, slacktest.BlockActions(slacktest.Click{Home: true, User: gateApprover, ActionID: slackui.ActionApprove, Value: value}))
		g.check(t, thread, runsBefore, realValue)
	})
}

// The Home tab answers only its own tab's event: opening the Messages tab
// publishes nothing.
func TestHomeTabIgnoresTheMessagesTab(t *testing.T) {
	t.Parallel()
	g := newHomeGate(t)
	body := slacktest.EventCallback("", map[string]any{"type": "app_home_opened", "user": gateApprover, "tab": "messages"})
	if code, _ := g.post(t, "/slack/events", "application/json", body); code != http.StatusOK {
		t.Fatalf("app_home_opened (messages) = %d", code)
	}
	if n := len(g.slack.CallsTo("views.publish")); n != 0 {
		t.Errorf("%d views published for the Messages tab, want none", n)
	}
}

// Over Socket Mode, app_home_opened publishes the Home tab as over HTTP.
func TestSocketModeHomeTab(t *testing.T) {
	t.Parallel()
	g := newHomeGate(t)
	_, value := g.pending(t)
	opened := json.RawMessage(slacktest.AppHomeOpened("EvHome1", gateApprover))
	sock := newSocketSlack(t, g.slack, []map[string]any{{"envelope_id": "env-home", "type": "events_api", "payload": opened}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api := slack.New("xoxb-test", slack.OptionAPIURL(sock.URL+"/api/"), slack.OptionAppLevelToken("xapp-test"))
	srv := handlers.New(api, g.svc, g.store, "", handlers.Options{BotUserID: slacktest.BotUserID, Home: g.store})
	done := make(chan error, 1)
	go func() { done <- srv.RunSocketMode(ctx, socketmode.New(api)) }()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, ok := g.slack.HomeView(gateApprover); ok {
			break
		}
	}
	if _, approve := homeOf(t, g, gateApprover); !slices.Equal(approve, []string{value}) {
		t.Errorf("the Home tab opened over Socket Mode has Approve buttons %v, want the card's %q", approve, value)
	}
	if _, n := sock.ack("env-home"); n != 1 {
		t.Errorf("app_home_opened acked %d times, want 1", n)
	}
	cancel()
	<-done
	_ = srv.Shutdown(context.Background())
}
