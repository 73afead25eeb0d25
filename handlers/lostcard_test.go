package handlers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// A process posts a card and dies before it records it (here: Slack's
// answer to the post never reaches it). The process that shows the call
// again takes that card up: no second card, the card redrawn, and what
// comes next redraws it. The first process, should it hear back after
// all, agrees: the card it records is the same.
func TestCardShownAgainIsTakenUp(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	root, th, st, c := cardThread(t, w)
	firstDone, release := postUnheard(t, w, inThread(root), runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c})

	again := handlers.NewReporter(w.api, w.store, nil, nil).WithBotID(slacktest.BotID)
	report(t, again, runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c, Again: true})
	cards := w.slack.Messages(slacktest.ChannelID, root)
	if len(cards) != 1 {
		t.Fatalf("%d cards in the thread, want 1: the card posted before taken up", len(cards))
	}
	if n := len(w.slack.CallsTo("chat.postMessage")); n != 2 { // the root and the card
		t.Errorf("chat.postMessage called %d times, want 2", n)
	}
	if ups := w.slack.CallsTo("chat.update"); len(ups) != 0 {
		t.Errorf("chat.update calls = %+v, want none: the card taken up shows the call as it waits", ups)
	}
	decided := c
	decided.Status, decided.Decision = agent.Approved, &agent.Decision{Kind: agent.Approve, By: "U0BOB", At: time.Now()}
	report(t, again, runner.Event{Kind: runner.CallDecided, Thread: th, State: st, Call: &decided})
	if card, _ := w.slack.Message(slacktest.ChannelID, cards[0].TS); !strings.Contains(card.Text, "approved") || strings.Contains(string(card.Blocks), `"action_id"`) {
		t.Errorf("the card after the decision = %s %s; want it approved, without buttons", card.Text, card.Blocks)
	}

	release()
	if err := <-firstDone; err != nil {
		t.Fatalf("the first process's report = %v", err)
	}
	if cards := w.slack.Messages(slacktest.ChannelID, root); len(cards) != 1 {
		t.Errorf("%d cards in the thread once the first process heard back, want 1", len(cards))
	}
	if del := w.slack.CallsTo("chat.delete"); len(del) != 0 {
		t.Errorf("chat.delete calls = %+v, want none: both processes recorded the same card", del)
	}
}

// postUnheard has a process of its own report e, whose post that match
// accepts (the card in the thread of root: inThread) Slack answers only
// once release is called: it returns when that post is in Slack, its
// poster not having heard back, and done gives the report's error once
// it has.
func postUnheard(t *testing.T, w *streamWorld, match func(slacktest.Call) bool, e runner.Event) (done <-chan error, release func()) {
	t.Helper()
	recorded, release := w.slack.HoldAnswer("chat.postMessage", match)
	t.Cleanup(release)
	poster := handlers.NewReporter(w.api, w.store, nil, nil).WithBotID(slacktest.BotID)
	errs := make(chan error, 1)
	go func() { errs <- poster.Report(context.Background(), e) }()
	select {
	case <-recorded:
	case err := <-errs:
		t.Fatalf("the poster's report ended before its post: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the poster did not post")
	}
	return errs, release
}

// inThread accepts a post in the thread of root.
func inThread(root string) func(slacktest.Call) bool {
	return func(m slacktest.Call) bool { return m.ThreadTS == root }
}

// A click reaches a process that has no record of the card (its poster
// has not heard back from Slack yet, or died): the card in the thread is
// found and redrawn with the decision, not left showing its buttons.
func TestDecisionRedrawsACardNotRecordedYet(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	root, th, st, c := cardThread(t, w)
	firstDone, release := postUnheard(t, w, inThread(root), runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c})

	decider := handlers.NewReporter(w.api, w.store, nil, nil).WithBotID(slacktest.BotID)
	running := c
	running.Status, running.Attempts = agent.Running, 1
	running.Decision = &agent.Decision{Kind: agent.Approve, By: "U0BOB", At: time.Now()}
	report(t, decider, runner.Event{Kind: runner.CallStarted, Thread: th, State: st, Call: &running})
	cards := w.slack.Messages(slacktest.ChannelID, root)
	if len(cards) != 1 {
		t.Fatalf("%d cards in the thread, want 1", len(cards))
	}
	if card, _ := w.slack.Message(slacktest.ChannelID, cards[0].TS); strings.Contains(string(card.Blocks), `"action_id":"approve"`) {
		t.Errorf("the card once the call runs = %s %s; want it without its buttons", card.Text, card.Blocks)
	}
	release()
	if err := <-firstDone; err != nil {
		t.Fatalf("the poster's report = %v", err)
	}
	if card, _ := w.slack.Message(slacktest.ChannelID, cards[0].TS); strings.Contains(string(card.Blocks), `"action_id":"approve"`) {
		t.Errorf("the card once its poster heard back = %s; want it as the decision left it", card.Blocks)
	}
}

// Another app posts, in the thread, a message that carries a card's
// metadata for the call. It is not taken up as the card: a card of the
// bot's own is posted, and it is the one the decision redraws; the other
// app's message is left alone.
func TestAnotherAppsMessageIsNotTakenForTheCard(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	root, th, st, c := cardThread(t, w)
	fake := postAsAnotherApp(t, w, slacktest.ChannelID, map[string]any{"card": "card:" + c.Key + "#0"}, slack.MsgOptionTS(root))
	r := handlers.NewReporter(w.api, w.store, nil, nil).WithBotID(slacktest.BotID)
	report(t, r, runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c, Again: true})
	msgs := w.slack.Messages(slacktest.ChannelID, root)
	if len(msgs) != 2 || msgs[1].TS == fake || !strings.Contains(string(msgs[1].Blocks), `"action_id":"approve"`) {
		t.Fatalf("thread = %+v; want the other app's message, then the bot's own card", msgs)
	}
	decided := c
	decided.Status, decided.Decision = agent.Approved, &agent.Decision{Kind: agent.Approve, By: "U0BOB", At: time.Now()}
	report(t, r, runner.Event{Kind: runner.CallDecided, Thread: th, State: st, Call: &decided})
	if card, _ := w.slack.Message(slacktest.ChannelID, msgs[1].TS); !strings.Contains(card.Text, "approved") {
		t.Errorf("the bot's card after the decision = %s", card.Text)
	}
	notUpdated(t, w, fake)
}

// A card of several approvals taken up after an approval came shows
// that approval: it was posted before it.
func TestCardTakenUpShowsItsApprovals(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	root, th, st, c := cardThread(t, w)
	gate := func(approvals ...agent.Approval) *runner.Gate {
		return &runner.Gate{Required: 2, Approvals: approvals, Approvers: []string{"U0BOB", "U0CAROL"}, Requester: "U0ALICE",
			Decisions: []agent.Kind{agent.Approve, agent.Edit, agent.Reject}}
	}
	done, release := postUnheard(t, w, inThread(root), runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c, Gate: gate()})
	again := handlers.NewReporter(w.api, w.store, nil, nil).WithBotID(slacktest.BotID)
	report(t, again, runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c, Again: true,
		Gate: gate(agent.Approval{By: "U0BOB", At: time.Now()})})
	cards := w.slack.Messages(slacktest.ChannelID, root)
	if len(cards) != 1 {
		t.Fatalf("%d cards in the thread, want 1", len(cards))
	}
	if card, _ := w.slack.Message(slacktest.ChannelID, cards[0].TS); !strings.Contains(card.Text+string(card.Blocks), "1 of 2 approvals") {
		t.Errorf("the card taken up shows %s %s; want Bob's approval, 1 of 2", card.Text, card.Blocks)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the first process's report = %v", err)
	}
	if card, _ := w.slack.Message(slacktest.ChannelID, cards[0].TS); !strings.Contains(card.Text+string(card.Blocks), "1 of 2 approvals") {
		t.Errorf("once its poster heard back, the card shows %s; want Bob's approval still", card.Blocks)
	}
}

// A copy of a card, in a direct message, posted by a process that died
// before recording it: the process that shows the card again takes the
// copy up rather than send the approver a second one, and the decision
// redraws it.
func TestCopyShownAgainIsTakenUp(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	root, th, st, c := cardThread(t, w)
	dm := slacktest.DMChannel("U0BOB")
	copies := &runner.Copies{DM: []string{"U0BOB"}}
	// The card is posted and recorded, its copy posted.
	done, release := postUnheard(t, w, func(m slacktest.Call) bool { return m.Channel == dm },
		runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c, Copies: copies})
	// Then another app posts there a message with the copy's metadata.
	fake := postAsAnotherApp(t, w, dm, map[string]any{"copy": runner.CopyKey(c.Key, c.Attempts, dm)})

	again := handlers.NewReporter(w.api, w.store, nil, nil).WithBotID(slacktest.BotID)
	report(t, again, runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c, Copies: copies, Again: true})
	if cards := w.slack.Messages(slacktest.ChannelID, root); len(cards) != 1 {
		t.Fatalf("%d cards in the thread, want 1", len(cards))
	}
	got := w.slack.Messages(dm, "")
	if len(got) != 2 || got[0].OtherApp || got[1].TS != fake {
		t.Fatalf("Bob's direct messages = %+v; want the copy posted first, then the other app's message", got)
	}
	decided := c
	decided.Status, decided.Decision = agent.Approved, &agent.Decision{Kind: agent.Approve, By: "U0BOB", At: time.Now()}
	report(t, again, runner.Event{Kind: runner.CallDecided, Thread: th, State: st, Call: &decided})
	if cp, _ := w.slack.Message(dm, got[0].TS); !strings.Contains(cp.Text, "approved") || strings.Contains(string(cp.Blocks), `"action_id"`) {
		t.Errorf("the copy after the decision = %s %s; want it approved, without buttons", cp.Text, cp.Blocks)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the first process's report = %v", err)
	}
	if got := w.slack.Messages(dm, ""); len(got) != 2 {
		t.Errorf("%d messages in Bob's direct messages once the first process heard back, want 2: the copy and the other app's", len(got))
	}
	notUpdated(t, w, fake)
}

// A click on the card, handled by another replica before the card's
// poster heard back from Slack, decides the call before its copies go
// out: the poster sends none (they would offer buttons that decide
// nothing), and what comes next redraws the card alone.
func TestNoCopiesOfACardDecidedBeforeThem(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	root, th, st, c := cardThread(t, w)
	copies := &runner.Copies{Channel: "C0NOTIFY", DM: []string{"U0BOB"}}
	done, release := postUnheard(t, w, inThread(root), runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c, Copies: copies})
	// The other replica's claim of Bob's approval.
	if _, won, err := w.store.Claim(context.Background(), th, runner.DecisionKey(c), []byte(`{"kind":"approve","by":"U0BOB"}`)); err != nil || !won {
		t.Fatalf("claim = %v, %v", won, err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the poster's report = %v", err)
	}
	for _, ch := range []string{"C0NOTIFY", slacktest.DMChannel("U0BOB")} {
		if got := w.slack.Messages(ch, ""); len(got) != 0 {
			t.Errorf("%d copies in %s, want none: the call was decided", len(got), ch)
		}
	}
	decided := c
	decided.Status, decided.Decision = agent.Approved, &agent.Decision{Kind: agent.Approve, By: "U0BOB", At: time.Now()}
	report(t, handlers.NewReporter(w.api, w.store, nil, nil).WithBotID(slacktest.BotID),
		runner.Event{Kind: runner.CallDecided, Thread: th, State: st, Call: &decided})
	cards := w.slack.Messages(slacktest.ChannelID, root)
	if card, _ := w.slack.Message(slacktest.ChannelID, cards[0].TS); len(cards) != 1 || !strings.Contains(card.Text, "approved") {
		t.Errorf("thread = %d cards, the card %q; want one, approved", len(cards), card.Text)
	}
}

// postAsAnotherApp has another app post in channel a message carrying a
// card's metadata with payload, and returns its ts.
func postAsAnotherApp(t *testing.T, w *streamWorld, channel string, payload map[string]any, opts ...slack.MsgOption) string {
	t.Helper()
	mallory := slack.New(slacktest.OtherAppToken, slack.OptionAPIURL(w.slack.URL()))
	opts = append(opts, slack.MsgOptionText("Approval needed", false),
		slack.MsgOptionMetadata(slack.SlackMetadata{EventType: "countersign_card", EventPayload: payload}))
	_, ts, err := mallory.PostMessageContext(context.Background(), channel, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// notUpdated checks that the bot never updated the message ts.
func notUpdated(t *testing.T, w *streamWorld, ts string) {
	t.Helper()
	for _, u := range w.slack.CallsTo("chat.update") {
		if u.TS == ts {
			t.Errorf("the other app's message was updated: %+v", u)
		}
	}
}
