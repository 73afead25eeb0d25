package handlers_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// TestStartThatLostItsLeaseBeforeSavingIsCarriedOnOnce: replica A takes
// "/agent stall" and posts its root message; its first run stalls past
// the thread's lease before its first save (the lease lapses while the
// model works), so the save is fenced and the thread has no
// conversation. The request is not taken for started: it stays due, and
// the intake's retry (here replica B's) starts the conversation. One
// root message, one conversation that ran the request once, one answer.
func TestStartThatLostItsLeaseBeforeSavingIsCarriedOnOnce(t *testing.T) {
	b := newIntakeBed(t)
	rdb := b.client // the bed's Redis, in-process or redis-server
	ctx := context.Background()
	var lost atomic.Bool
	b.plan = func(text string) {
		if text != "stall" || !lost.CompareAndSwap(false, true) {
			return
		}
		// The run stalled past its lease: end it, as its lapse would.
		roots := b.roots()["stall"]
		if len(roots) != 1 {
			t.Errorf("%d root messages when the model is asked, want 1", len(roots))
			return
		}
		thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, roots[0])
		if n, err := rdb.Del(ctx, b.prefix+":{"+thread+"}:lease").Result(); err != nil || n != 1 {
			t.Errorf("ending the lease of the starting run: %d keys, %v; want it held", n, err)
		}
	}
	a := b.replica(1)
	other := b.replica(1)

	b.command(a, "stall")
	if err := a.srv.Shutdown(ctx); err != nil { // A's attempt is over
		t.Fatal(err)
	}
	if !lost.Load() {
		t.Fatal("the model was not asked: the test does not test anything")
	}
	if n, err := b.rdb.PendingIntake(ctx); err != nil || n != 1 {
		t.Fatalf("after the start lost its lease unsaved, %d requests are due (%v), want 1: the request is dropped", n, err)
	}
	roots := b.roots()["stall"]
	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, roots[0])
	if n := turns(t, a.svc, thread, "stall"); n != 0 {
		t.Fatalf("the fenced run saved the request %d times: the test does not test anything", n)
	}

	b.advance(time.Minute) // past A's hold
	other.runIntake()
	b.until("the intake carries the request on", func() bool {
		n, err := b.rdb.PendingIntake(ctx)
		return err == nil && n == 0 && len(answers(b, roots[0], "You said: stall")) > 0
	})
	other.stop()
	if err := other.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	if got := b.roots()["stall"]; len(got) != 1 {
		t.Errorf("%d root messages for the request, want 1", len(got))
	}
	if n := turns(t, other.svc, thread, "stall"); n != 1 {
		t.Errorf("the conversation ran the request %d times, want once", n)
	}
	if got := answers(b, roots[0], "You said: stall"); len(got) != 1 {
		t.Errorf("the answer was posted %d times in the thread, want once: %q", len(got), got)
	}
}

// answers returns the texts of the messages posted in the thread of root
// that contain text.
func answers(b *intakeBed, root, text string) []string {
	var out []string
	for _, c := range b.fake.CallsTo("chat.postMessage") {
		if c.ThreadTS == root && c.OK() && strings.Contains(c.Text, text) {
			out = append(out, c.Text)
		}
	}
	return out
}
