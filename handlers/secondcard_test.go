package handlers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// Two replicas post the card of one call that needs two approvals: the
// second, which had Bob's approval to show, finds the first one's card
// recorded. Its own post is removed, and the card that stays shows Bob's
// approval. People see one card, which is the one that is kept in step.
func TestSecondPostOfACardIsRemovedAndItsCountShown(t *testing.T) {
	t.Parallel()
	w := newStreamWorld(t)
	root, th, st, c := cardThread(t, w)
	first := handlers.NewReporter(w.api, w.store, nil, nil)
	second := handlers.NewReporter(w.api, w.store, nil, nil)
	gate := func(approvals ...agent.Approval) *runner.Gate {
		return &runner.Gate{Required: 2, Approvals: approvals, Approvers: []string{"U0BOB", "U0CAROL"}, Requester: "U0ALICE",
			Decisions: []agent.Kind{agent.Approve, agent.Edit, agent.Reject}}
	}
	report(t, first, runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c, Gate: gate()})
	report(t, second, runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c,
		Gate: gate(agent.Approval{By: "U0BOB", At: time.Now()})})

	cards := w.slack.Messages(slacktest.ChannelID, root)
	if len(cards) != 1 {
		t.Fatalf("%d cards in the thread, want 1", len(cards))
	}
	posts := w.slack.CallsTo("chat.postMessage")
	del := w.slack.CallsTo("chat.delete")
	if len(del) != 1 || del[0].TS != posts[len(posts)-1].TS || del[0].TS == cards[0].TS {
		t.Errorf("chat.delete calls = %+v, want one, of the second post", del)
	}
	card, _ := w.slack.Message(slacktest.ChannelID, cards[0].TS)
	if got := card.Text + string(card.Blocks); !strings.Contains(got, "1 of 2 approvals") || !strings.Contains(got, "U0BOB") {
		t.Errorf("the card kept shows %s %s; want Bob's approval, 1 of 2", card.Text, card.Blocks)
	}
	// A post that had nothing new to show (a card as first posted, shown
	// again after a crash) is removed too, and leaves the count as it is.
	third := handlers.NewReporter(w.api, w.store, nil, nil)
	report(t, third, runner.Event{Kind: runner.ApprovalNeeded, Thread: th, State: st, Call: &c, Gate: gate()})
	if cards := w.slack.Messages(slacktest.ChannelID, root); len(cards) != 1 {
		t.Fatalf("%d cards in the thread after a third post, want 1", len(cards))
	}
	if card, _ := w.slack.Message(slacktest.ChannelID, cards[0].TS); !strings.Contains(card.Text+string(card.Blocks), "1 of 2 approvals") {
		t.Errorf("after a third post, the card kept shows %s %s; want Bob's approval still", card.Text, card.Blocks)
	}
	// What comes next redraws the card that stays.
	decided := c
	decided.Status, decided.Decision = agent.Approved, &agent.Decision{Kind: agent.Approve, By: "U0CAROL", At: time.Now()}
	report(t, first, runner.Event{Kind: runner.CallDecided, Thread: th, State: st, Call: &decided})
	if card, _ := w.slack.Message(slacktest.ChannelID, cards[0].TS); !strings.Contains(card.Text, "approved") {
		t.Errorf("the card after the decision = %s", card.Text)
	}
}
