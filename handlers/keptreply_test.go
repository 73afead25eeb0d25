package handlers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// bystander may decide none of the calls of keptBed's conversation.
const bystander = "U0CAROL"

// keptBed starts "/agent block" on replica a: its root message is
// posted and its model holds the first run, before the conversation's
// first save. The model then asks for a deploy, which only U0BOB may
// approve: the first save is the pause. It returns the thread's root.
func keptBed(t *testing.T, b *intakeBed, a *replica) string {
	t.Helper()
	b.calls = func(text string) []llm.ToolCall {
		if text == "block" {
			return []llm.ToolCall{{Name: "deploy", Arguments: `{"env":"prod"}`}}
		}
		return nil
	}
	b.command(a, "block")
	<-b.blocked
	roots := b.roots()["block"]
	if len(roots) != 1 {
		t.Fatalf("%d root messages, want 1", len(roots))
	}
	return roots[0]
}

// replyKept sends user's reply to r in the thread of root while the
// conversation has no checkpoint, and waits until it is kept for the
// first save.
func (b *intakeBed) replyKept(r *replica, root, user, text string) {
	b.t.Helper()
	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, root)
	now := time.Now()
	b.send(r, "/slack/events", "application/json", slacktest.EventCallback("", map[string]any{"type": "message",
		"channel": slacktest.ChannelID, "user": user, "text": text,
		"ts": fmt.Sprintf("%d.%06d", now.Unix(), now.Nanosecond()/1000), "thread_ts": root}))
	b.until("the reply is kept for the first save", func() bool {
		n, err := b.client.Exists(context.Background(), b.prefix+":{"+thread+"}:kept").Result()
		return err == nil && n == 1
	})
}

// keptDuringStart starts "/agent block" on a, which waits before its
// first save, and has gateRequester reply "and more" in its thread, kept
// for that save. It returns the thread's root and key.
func (b *intakeBed) keptDuringStart(a *replica) (root, thread string) {
	b.t.Helper()
	b.calls = func(string) []llm.ToolCall { return nil }
	b.command(a, "block")
	<-b.blocked
	root = b.roots()["block"][0]
	b.replyKept(a, root, gateRequester, "and more")
	return root, slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, root)
}

// keptReplyTaken checks that the conversation of svc took the reply "and
// more" want times, and that it was answered want times.
func keptReplyTaken(t *testing.T, b *intakeBed, svc *runner.Service, root, thread string, want int) {
	t.Helper()
	if n := turns(t, svc, thread, "and more"); n != want {
		t.Errorf("the conversation took the kept reply %d times, want %d", n, want)
	}
	if got := answers(b, root, "You said: and more"); len(got) != want {
		t.Errorf("the kept reply was answered %d times, want %d: %q", len(got), want, got)
	}
}

// notes returns the texts of the notes the thread's state holds.
func notes(t *testing.T, svc *runner.Service, thread string) []string {
	t.Helper()
	res, err := svc.State(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range res.State.Notes {
		out = append(out, n.Text)
	}
	return out
}

// threadEphemerals returns the ephemeral messages shown to user in the thread
// of root.
func threadEphemerals(b *intakeBed, root, user string) []string {
	var out []string
	for _, c := range b.fake.CallsTo("chat.postEphemeral") {
		if c.ThreadTS == root && c.User == user && c.OK() {
			out = append(out, c.Text)
		}
	}
	return out
}

// TestKeptReplyRefusedReachesItsPerson: a reply typed while a
// conversation's first run works is kept for its first save, a pause on
// a deploy that only U0BOB may approve. Its author may decide nothing:
// as when the same reply comes a second later, the reply is kept as a
// note, once, and its author is told so in an ephemeral message, once.
// (Before, the start applied it itself and only logged the refusal.)
// Its request is settled.
func TestKeptReplyRefusedReachesItsPerson(t *testing.T) {
	t.Parallel()
	b := newIntakeBed(t)
	ctx := context.Background()
	a := b.replica(2)
	root := keptBed(t, b, a)
	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, root)
	b.replyKept(a, root, bystander, "not now")
	b.release()
	b.until("the author of the kept reply is answered", func() bool { return len(threadEphemerals(b, root, bystander)) > 0 })
	if err := a.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	got := threadEphemerals(b, root, bystander)
	if len(got) != 1 || !strings.Contains(got[0], "Your reply rejected nothing") {
		t.Errorf("the kept reply's author was shown %q, want one refusal", got)
	}
	if got := notes(t, a.svc, thread); len(got) != 1 || got[0] != "not now" {
		t.Errorf("the thread's notes = %q, want the kept reply once", got)
	}
	if n, err := b.rdb.PendingIntake(ctx); err != nil || n != 0 {
		t.Errorf("%d requests still due (%v), want none", n, err)
	}
}

// TestKeptReplyOfADeadStartIsCarriedOnByTheIntake: the process that
// starts a conversation dies right after its first save handed over a
// reply kept meanwhile, before carrying it on (its carrier drops it
// here). The reply's request stayed due: once the kept reply would have
// expired, another replica's intake carries it on, as any reply, once —
// and its author hears back.
func TestKeptReplyOfADeadStartIsCarriedOnByTheIntake(t *testing.T) {
	t.Parallel()
	b := newIntakeBed(t)
	ctx := context.Background()
	a := b.replica(2)
	dropped := make(chan []runner.Message, 1)
	a.svc.SetKeptCarrier(func(_ context.Context, replies []runner.Message) { dropped <- replies })
	root := keptBed(t, b, a)
	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, root)
	b.replyKept(a, root, bystander, "not now")
	b.release()
	if got := <-dropped; len(got) != 1 || got[0].Text != "not now" || got[0].Ref == "" {
		t.Fatalf("the first save handed over %+v, want the kept reply with its request", got)
	}
	if err := a.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := notes(t, a.svc, thread); len(got) != 0 {
		t.Fatalf("the thread's notes = %q before anyone carried the reply on: the test does not test anything", got)
	}
	if n, err := b.rdb.PendingIntake(ctx); err != nil || n != 1 {
		t.Fatalf("%d requests due (%v) after the start's process died, want the kept reply's: it is lost", n, err)
	}

	// The intake looks at the kept reply again within minutes, not at
	// the end of its kept time.
	heir := b.replica(1)
	b.advance(3 * time.Minute)
	heir.runIntake()
	b.until("the heir carries the kept reply on", func() bool {
		n, err := b.rdb.PendingIntake(ctx)
		return err == nil && n == 0 && len(threadEphemerals(b, root, bystander)) > 0
	})
	heir.stop()
	if err := heir.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := threadEphemerals(b, root, bystander); len(got) != 1 || !strings.Contains(got[0], "Your reply rejected nothing") {
		t.Errorf("the kept reply's author was shown %q, want one refusal", got)
	}
	if got := notes(t, heir.svc, thread); len(got) != 1 || got[0] != "not now" {
		t.Errorf("the thread's notes = %q, want the kept reply once", got)
	}
}

// TestKeptReplyCarriedOnOnceWhenTheIntakeRaces: the reply's request
// becomes due for another replica's intake (its first look, minutes
// after the reply was kept) just as the start carries the reply on
// itself. Both try, in either order or interleaved; one applies it: one
// turn, one answer. (At the look that ends the kept time instead, a
// look before the first save rightly finds no conversation:
// TestKeptReplyExpiredLookDecidesOnce.)
func TestKeptReplyCarriedOnOnceWhenTheIntakeRaces(t *testing.T) {
	t.Parallel()
	b := newIntakeBed(t)
	b.blockAgain = true
	ctx := context.Background()
	a := b.replica(2)
	other := b.replica(2)
	root, thread := b.keptDuringStart(a)
	b.advance(3 * time.Minute)
	other.runIntake()
	b.release()
	b.until("the kept reply is answered", func() bool {
		n, err := b.rdb.PendingIntake(ctx)
		return err == nil && n == 0 && len(answers(b, root, "You said: and more")) > 0
	})
	other.stop()
	for _, r := range []*replica{a, other} {
		if err := r.srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	keptReplyTaken(t, b, a.svc, root, thread, 1)
}

// TestKeptReplyExpiredLookDecidesOnce: the intake's look that ends a
// kept reply's kept time decides it once, against the first save. A look
// before the save finds no conversation: the reply is taken back from
// what the first save hands over (before, the look kept it again, and
// the start then handed over a reply whose request was given up), and
// the conversation goes on without it. A look after the save, whose
// process died before carrying the reply on, applies it once.
func TestKeptReplyExpiredLookDecidesOnce(t *testing.T) {
	t.Parallel()
	t.Run("before the first save", func(t *testing.T) {
		b := newIntakeBed(t)
		b.blockAgain = true
		ctx := context.Background()
		a := b.replica(2)
		other := b.replica(2)
		root, thread := b.keptDuringStart(a)
		b.advance(runner.KeptReplyTTL + time.Minute)
		other.runIntake()
		// Left due: the command, which the start (or, its hold lapsed in
		// the bed's time, another replica's start) still carries on.
		b.until("the last look gives the kept reply up", func() bool {
			n, err := b.rdb.PendingIntake(ctx)
			return err == nil && n == 1
		})
		if n, err := b.client.Exists(ctx, b.prefix+":{"+thread+"}:kept").Result(); err != nil || n != 0 {
			t.Errorf("the reply given up is still kept for the first save (%d, %v)", n, err)
		}
		b.release()
		b.until("the conversation answers", func() bool { return len(answers(b, root, "You said: block")) > 0 })
		other.stop()
		for _, r := range []*replica{a, other} {
			if err := r.srv.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := turns(t, a.svc, thread, "and more"); n != 0 {
			t.Errorf("the conversation took the reply given up %d times, want none", n)
		}
		if got := answers(b, root, "You said: and more"); len(got) != 0 {
			t.Errorf("the reply given up was answered: %q", got)
		}
	})
	t.Run("after the first save", func(t *testing.T) {
		b := newIntakeBed(t)
		ctx := context.Background()
		a := b.replica(2)
		dropped := make(chan []runner.Message, 1)
		a.svc.SetKeptCarrier(func(_ context.Context, replies []runner.Message) { dropped <- replies })
		root, thread := b.keptDuringStart(a)
		b.release()
		if got := <-dropped; len(got) != 1 || got[0].Text != "and more" {
			t.Fatalf("the first save handed over %+v, want the kept reply", got)
		}
		if err := a.srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		heir := b.replica(1)
		b.advance(runner.KeptReplyTTL + time.Minute)
		heir.runIntake()
		b.until("the heir carries the kept reply on", func() bool {
			n, err := b.rdb.PendingIntake(ctx)
			return err == nil && n == 0 && len(answers(b, root, "You said: and more")) > 0
		})
		heir.stop()
		if err := heir.srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		keptReplyTaken(t, b, heir.svc, root, thread, 1)
	})
}
