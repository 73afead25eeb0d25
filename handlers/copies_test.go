package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackdir"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// A card's copies — in the notify channel and by direct message to each
// approver but the requester, group members included — carry the card's
// buttons and a link to the thread, are posted once however often the
// card is shown again, and are redrawn with it.
func TestCopiesKeptInStep(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	w.slack.SetGroupMembers("S0OPS", "U0CAROL", "U0BOB", "U0ALICE")
	root, th, st, c := cardThread(t, w)
	r := handlers.NewReporter(w.api, w.store, nil, nil).WithGroups(slackdir.NewGroups(w.api, 0, nil))
	copies := &runner.Copies{Channel: "C0NOTIFY", DM: []string{"U0BOB", "S0OPS", "U0ALICE"}}
	for range 2 { // the second: shown again after a crash
		report(t, r, runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c, Copies: copies})
	}

	// Shown twice, it was posted twice: the second post, which is not
	// the card recorded, is removed.
	cards := w.slack.Messages(slacktest.ChannelID, root)
	if len(cards) != 1 {
		t.Fatalf("%d cards in the thread, want 1 (the second post of the card removed)", len(cards))
	}
	if del := w.slack.CallsTo("chat.delete"); len(del) != 1 || del[0].TS == cards[0].TS || !del[0].OK() {
		t.Errorf("chat.delete calls = %+v, want one, of the second post", del)
	}
	value := buttonValueOf(t, cards[0], "approve")
	where := []string{"C0NOTIFY", slacktest.DMChannel("U0BOB"), slacktest.DMChannel("U0CAROL")}
	for _, ch := range where {
		got := w.slack.Messages(ch, "")
		if len(got) != 1 {
			t.Fatalf("%d copies in %s, want 1", len(got), ch)
		}
		for _, action := range []string{"approve", "edit", "reject"} {
			if v := buttonValueOf(t, got[0], action); v == "" || (action == "approve" && v != value) {
				t.Errorf("copy in %s: %s button value %q, want the card's %q", ch, action, v, value)
			}
		}
		if link := slacktest.Permalink(slacktest.ChannelID, root); !bytes.Contains(got[0].Blocks, []byte(link)) {
			t.Errorf("copy in %s does not link to the thread %s: %s", ch, link, got[0].Blocks)
		}
	}
	if got := w.slack.Messages(slacktest.DMChannel("U0ALICE"), ""); len(got) != 0 {
		t.Errorf("the requester got %d direct messages, want none", len(got))
	}
	if n := len(w.slack.CallsTo("chat.getPermalink")); n != 1 {
		t.Errorf("chat.getPermalink called %d times, want once per thread", n)
	}

	// Decided: the card that was recorded and every copy show the same.
	decided := c
	decided.Status, decided.Decision = agent.Approved, &agent.Decision{Kind: agent.Approve, By: "U0BOB", At: time.Now()}
	report(t, r, runner.Event{Kind: runner.CallDecided, Thread: th, State: st, Call: &decided})
	card, _ := w.slack.Message(slacktest.ChannelID, cards[0].TS)
	if !strings.Contains(card.Text, "approved") || bytes.Contains(card.Blocks, []byte(`"action_id"`)) {
		t.Fatalf("card after the decision = %s %s", card.Text, card.Blocks)
	}
	for _, ch := range where {
		cp, _ := w.slack.Message(ch, w.slack.Messages(ch, "")[0].TS)
		if cp.Text != card.Text || !bytes.HasSuffix(cp.Blocks, card.Blocks[1:]) {
			t.Errorf("copy in %s = %s %s; want the card's %s %s", ch, cp.Text, cp.Blocks, card.Text, card.Blocks)
		}
	}
}

// cardThread posts Alice's request in the channel and returns its root's
// ts, its thread, its state and a call of it that waits for approval.
func cardThread(t *testing.T, w *streamWorld) (root, th string, st *agent.State, c agent.Call) {
	t.Helper()
	_, root, err := w.api.PostMessageContext(context.Background(), slacktest.ChannelID, slack.MsgOptionText("<@U0ALICE> asked: deploy", false))
	if err != nil {
		t.Fatal(err)
	}
	th = slacktest.TeamID + ":" + slacktest.ChannelID + ":" + root
	st = &agent.State{Requester: "U0ALICE", Channel: slacktest.ChannelID}
	c = agent.Call{Key: "1.0", ID: "c1", Tool: "http_request", Args: json.RawMessage(`{"method":"POST","url":"https://example.com/deploy"}`),
		Status: agent.Pending, NeedsApproval: true, Since: time.Now(), Expires: time.Now().Add(time.Hour)}
	return root, th, st, c
}

// Reminders and escalations are thread messages that mention the people
// they are for.
func TestReminderMessages(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	r := handlers.NewReporter(w.api, w.store, nil, nil)
	c := agent.Call{Key: "1.0", Tool: "http_request", Status: agent.Pending}
	report(t, r, runner.Event{Kind: runner.Reminder, Call: &c, People: []string{"U0BOB", "S0OPS"}, Waited: time.Hour})
	report(t, r, runner.Event{Kind: runner.Escalated, Call: &c, People: []string{"S0ONCALL"}, Waited: 4 * time.Hour})
	want := []string{
		"Reminder: <@U0BOB>, <!subteam^S0OPS> — http_request has waited 1h for approval",
		"Escalated: <!subteam^S0ONCALL> — http_request has waited 4h for approval; you may now decide it too (the card is above).",
	}
	if got := w.texts(); !slices.Equal(got, want) {
		t.Errorf("thread = %q, want %q", got, want)
	}
}

// buttonValueOf finds the value of a message's button, or "".
func buttonValueOf(t *testing.T, c slacktest.Call, actionID string) string {
	t.Helper()
	v, _ := c.ButtonValue(actionID)
	return v
}

// oldLayout is the store as the version before copies had an index wrote
// it: the card and each copy recorded by key, no index of the copies.
type oldLayout struct{ handlers.Store }

func (o oldLayout) Claim(ctx context.Context, thread, key string, value []byte) ([]byte, bool, error) {
	if strings.HasPrefix(key, "copies:") {
		return value, true, nil
	}
	return o.Store.Claim(ctx, thread, key, value)
}

// A card posted, with its copies, by the version before copies had an
// index (a thread paused across the deploy) is still redrawn with every
// copy by the new version, on another replica.
func TestCopiesOfACardPostedBeforeTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newStreamWorld(t)
	_, root, err := w.api.PostMessageContext(ctx, slacktest.ChannelID, slack.MsgOptionText("<@U0ALICE> asked: deploy", false))
	if err != nil {
		t.Fatal(err)
	}
	th := slacktest.TeamID + ":" + slacktest.ChannelID + ":" + root
	st := &agent.State{Requester: "U0ALICE", Channel: slacktest.ChannelID}
	c := agent.Call{Key: "1.0", ID: "c1", Tool: "http_request", Args: json.RawMessage(`{"method":"POST","url":"https://example.com/deploy"}`),
		Status: agent.Pending, NeedsApproval: true, Since: time.Now(), Expires: time.Now().Add(time.Hour)}
	old := handlers.NewReporter(w.api, oldLayout{w.store}, nil, nil)
	report(t, old, runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c,
		Copies: &runner.Copies{Channel: "C0NOTIFY", DM: []string{"U0BOB"}}})
	where := []string{"C0NOTIFY", slacktest.DMChannel("U0BOB")}
	for _, ch := range where {
		if got := w.slack.Messages(ch, ""); len(got) != 1 {
			t.Fatalf("%d copies in %s, want 1", len(got), ch)
		}
	}

	decided := c
	decided.Status, decided.Decision = agent.Approved, &agent.Decision{Kind: agent.Approve, By: "U0BOB", At: time.Now()}
	report(t, handlers.NewReporter(w.api, w.store, nil, nil), runner.Event{Kind: runner.CallDecided, Thread: th, State: st, Call: &decided})
	card, _ := w.slack.Message(slacktest.ChannelID, w.slack.Messages(slacktest.ChannelID, root)[0].TS)
	if !strings.Contains(card.Text, "approved") {
		t.Fatalf("card after the decision = %s", card.Text)
	}
	for _, ch := range where {
		cp, _ := w.slack.Message(ch, w.slack.Messages(ch, "")[0].TS)
		if cp.Text != card.Text {
			t.Errorf("copy in %s after the decision = %q; want the card's %q", ch, cp.Text, card.Text)
		}
	}
}

// A rate-limited look-up of a user group's members is waited out: its
// members still get the card by direct message.
func TestCopiesToAGroupWaitOutARateLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newStreamWorld(t)
	w.slack.SetGroupMembers("S0OPS", "U0CAROL")
	w.slack.RateLimitNext("usergroups.users.list", 1, 10*time.Millisecond)
	_, root, err := w.api.PostMessageContext(ctx, slacktest.ChannelID, slack.MsgOptionText("<@U0ALICE> asked: deploy", false))
	if err != nil {
		t.Fatal(err)
	}
	r := handlers.NewReporter(w.api, w.store, nil, nil).WithGroups(slackdir.NewGroups(w.api, 0, nil))
	th := slacktest.TeamID + ":" + slacktest.ChannelID + ":" + root
	st := &agent.State{Requester: "U0ALICE", Channel: slacktest.ChannelID}
	c := agent.Call{Key: "1.0", ID: "c1", Tool: "http_request", Args: json.RawMessage(`{"method":"POST","url":"https://example.com/deploy"}`),
		Status: agent.Pending, NeedsApproval: true, Since: time.Now(), Expires: time.Now().Add(time.Hour)}
	report(t, r, runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c, Copies: &runner.Copies{DM: []string{"S0OPS"}}})
	if n := len(w.slack.CallsTo("usergroups.users.list")); n != 2 {
		t.Fatalf("usergroups.users.list called %d times, want the rate-limited call and its retry", n)
	}
	if got := w.slack.Messages(slacktest.DMChannel("U0CAROL"), ""); len(got) != 1 {
		t.Errorf("the group's member got %d direct messages, want 1", len(got))
	}
}
