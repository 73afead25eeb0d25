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
// "/agent stall" and posts its root message; while its first run's model
// works, another acquisition takes the thread's lease (which the run's
// first save was to take), so the save is refused and the thread has no
// conversation. The request is not taken for started: it stays due, and
// the intake's retry (here replica B's) starts the conversation. One
// root message, one conversation that ran the request once, one answer.
func TestStartThatLostItsLeaseBeforeSavingIsCarriedOnOnce(t *testing.T) {
	t.Parallel()
	b := newIntakeBed(t)
	rdb := b.client // the bed's Redis, in-process or redis-server
	ctx := context.Background()
	var lost atomic.Bool
	var leaseKey string
	b.plan = func(text string) {
		if text != "stall" || !lost.CompareAndSwap(false, true) {
			return
		}
		// Another acquisition takes the lease the run's first save was
		// to take.
		roots := b.roots()["stall"]
		if len(roots) != 1 {
			t.Errorf("%d root messages when the model is asked, want 1", len(roots))
			return
		}
		thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, roots[0])
		if ok, err := rdb.SetNX(ctx, b.prefix+":{"+thread+"}:lease", "elsewhere:1", time.Hour).Result(); err != nil || !ok {
			t.Errorf("taking the lease while the start's model works: %v, %v; want it free", ok, err)
		}
		leaseKey = b.prefix + ":{" + thread + "}:lease"
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

	// That acquisition ends.
	if n, err := rdb.Del(ctx, leaseKey).Result(); err != nil || n != 1 {
		t.Fatalf("ending the other acquisition: %d keys, %v; want its lease left alone by the refused save", n, err)
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
