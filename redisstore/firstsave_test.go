package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
)

// firstSave saves cp as a start's first save that takes the lease for
// token, and returns what the save was asked.
func firstSave(ctx context.Context, store *redisstore.Store, cp *graph.Checkpoint, token string, wake time.Time, l *runner.LastSave) (*runner.FirstSave, error) {
	f := &runner.FirstSave{Thread: cp.Thread, Token: token, TTL: time.Minute, Wake: wake}
	ctx = runner.WithFirstSave(graph.WithFence(ctx, token), f)
	if l != nil {
		ctx = runner.WithLastSave(ctx, l)
	}
	return f, store.Save(ctx, cp)
}

// TestFirstSaveTakesTheLease: a start's first save creates the thread
// and takes its lease in one step, on every kind of Redis the store runs
// on, and hands over the replies kept for the thread meanwhile. It
// writes nothing when another acquisition holds the lease (the replies
// stay kept for the next start) or the thread exists; and a reply is
// kept only while the thread has no head and its lease is free.
func TestFirstSaveTakesTheLease(t *testing.T) {
	t.Parallel()
	for name, rdb := range everyRedis() {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := redisstore.New(rdb(t), redisstore.Options{Prefix: uniqueName("first")})
			thread := uniqueName("T1:C1")
			now := time.Now()

			if kept, err := store.KeepReply(ctx, thread, []byte("one"), time.Minute); err != nil || kept != runner.KeptReply {
				t.Fatalf("KeepReply(no head, lease free) = %v, %v; want kept", kept, err)
			}
			// Another acquisition holds the lease: the first save is
			// refused, and a reply waits for that acquisition.
			other, err := store.AcquireLease(ctx, thread, "other", time.Minute)
			if err != nil || other == "" {
				t.Fatalf("AcquireLease = %q, %v", other, err)
			}
			if kept, err := store.KeepReply(ctx, thread, []byte("not kept"), time.Minute); err != nil || kept != runner.KeptNot {
				t.Errorf("KeepReply(no head, lease held) = %v, %v; want KeptNot", kept, err)
			}
			first := firstCheckpoint(thread, "hello")
			f, err := firstSave(ctx, store, first, runner.NewLeaseToken("A"), now.Add(time.Hour), nil)
			if !errors.Is(err, redisstore.ErrFenced) || f.Taken() {
				t.Fatalf("first save while another holds the lease = %v (taken %v), want ErrFenced", err, f.Taken())
			}
			if _, err := store.Load(ctx, thread); !errors.Is(err, graph.ErrNoCheckpoint) {
				t.Fatalf("Load after the refused first save = %v, want ErrNoCheckpoint", err)
			}
			if err := store.ReleaseLease(ctx, thread, other); err != nil {
				t.Fatal(err)
			}
			if kept, err := store.KeepReply(ctx, thread, []byte("two"), time.Minute); err != nil || kept != runner.KeptReply {
				t.Fatalf("KeepReply(no head, lease free again) = %v, %v; want kept", kept, err)
			}

			tokenA := runner.NewLeaseToken("A")
			f, err = firstSave(ctx, store, first, tokenA, now.Add(time.Hour), nil)
			if err != nil || !f.Taken() {
				t.Fatalf("first save = %v (taken %v)", err, f.Taken())
			}
			if runner.FirstSaveOf(runner.WithFirstSave(ctx, f)) != nil {
				t.Error("FirstSaveOf a first save that was made is not nil")
			}
			if took, replies := firstSaveReplies(f); !took || !slices.Equal(replies, []string{"one", "two"}) {
				t.Errorf("the first save handed over %q, want the two kept replies in order", replies)
			}
			if tok, err := store.AcquireLease(ctx, thread, "B", time.Minute); tok != "" || err != nil {
				t.Errorf("AcquireLease after the first save = %q, %v; want it held by the start", tok, err)
			}
			if ok, err := store.RenewLease(ctx, thread, tokenA, time.Minute); !ok || err != nil {
				t.Errorf("RenewLease(the start's token) = %v, %v; want renewed", ok, err)
			}
			if due, err := store.Due(ctx, now.Add(2*time.Hour), 10); err != nil || !slices.Contains(due, thread) {
				t.Errorf("Due after the first save = %v, %v; want the thread woken should its process die", due, err)
			}
			if kept, err := store.KeepReply(ctx, thread, []byte("three"), time.Minute); err != nil || kept != runner.NotKept {
				t.Errorf("KeepReply(a thread with a head) = %v, %v; want NotKept", kept, err)
			}
			// A later save of the run is fenced by the token taken.
			second := nextCheckpoint(first, "again")
			if err := store.Save(graph.WithFence(ctx, runner.NewLeaseToken("A")), second); !errors.Is(err, redisstore.ErrFenced) {
				t.Errorf("Save(fenced by another token) after the first save = %v, want ErrFenced", err)
			}
			if err := store.Save(graph.WithFence(ctx, tokenA), second); err != nil {
				t.Errorf("Save(fenced by the token the first save took) = %v", err)
			}
			// Another start's first save finds the thread.
			if err := store.ReleaseLease(ctx, thread, tokenA); err != nil {
				t.Fatal(err)
			}
			f, err = firstSave(ctx, store, firstCheckpoint(thread, "hello"), runner.NewLeaseToken("B"), time.Time{}, nil)
			if !errors.Is(err, graph.ErrConflict) || f.Taken() {
				t.Errorf("first save of a thread that exists = %v (taken %v), want a conflict", err, f.Taken())
			}
			if got, err := store.Load(ctx, thread); err != nil || got.Seq != second.Seq {
				t.Errorf("Load after the second start's first save = %+v, %v; want the run's second checkpoint", got, err)
			}
			if tok, err := store.AcquireLease(ctx, thread, "C", time.Minute); tok == "" || err != nil {
				t.Errorf("AcquireLease after the refused first save = %q, %v; want it free: the refused save took nothing", tok, err)
			}
		})
	}
}

// TestFirstSaveThatEndsTheSession: a start's first save that pauses or
// answers takes the lease and lets go of it in the same step, ending the
// session with the schedule it was given, and hands over the kept
// replies; on a Redis Cluster the session ends with CloseThread.
func TestFirstSaveThatEndsTheSession(t *testing.T) {
	t.Parallel()
	for name, rdb := range everyRedis() {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := redisstore.New(rdb(t), redisstore.Options{Prefix: uniqueName("firstclose")})
			thread := uniqueName("T1:C1")
			now := time.Now()
			token := runner.NewLeaseToken("A")
			wake := now.Add(3 * time.Hour)
			l := &runner.LastSave{Closing: runner.Closing{Thread: thread, Token: token, Answered: -1, Schedule: true, Wake: wake}}
			cp := firstCheckpoint(thread, "hello")
			cp.Status = graph.Done
			endSessionWithFirstSave(t, store, name == "cluster", cp, now.Add(time.Hour), l)
			if tok, err := store.AcquireLease(ctx, thread, "B", time.Minute); tok == "" || err != nil {
				t.Errorf("AcquireLease after the session ended = %q, %v; want the lease free", tok, err)
			}
			if due, _ := store.Due(ctx, now.Add(2*time.Hour), 10); slices.Contains(due, thread) {
				t.Errorf("Due before the session's wake-up = %v; want the thread not yet due", due)
			}
			if due, _ := store.Due(ctx, wake.Add(time.Minute), 10); !slices.Contains(due, thread) {
				t.Errorf("Due at the session's wake-up = %v; want the thread", due)
			}
		})
	}
}

// TestFirstSaveThatEndsTheSessionWithAuditAndInbox: a start's first
// save that ends the session with audit entries, a waiting call for the
// inbox and a decision for its decider's list writes all of them with
// the checkpoint: the kept reply is handed over, the entry is on the
// audit chain (which verifies), the call is in the inbox, the decision
// in its decider's list, the claim asked for is read back and the lease
// is free. On every kind of Redis the store runs on.
func TestFirstSaveThatEndsTheSessionWithAuditAndInbox(t *testing.T) {
	t.Parallel()
	for name, rdb := range everyRedis() {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := redisstore.New(rdb(t), redisstore.Options{Prefix: uniqueName("firstcloseaudit")})
			thread := uniqueName("T1:C1")
			now := time.Now()
			token := runner.NewLeaseToken("A")
			waiting := runner.InboxEntry{Thread: thread, Call: "0.0", Tool: "deploy", Requester: "U1", Since: now.UTC().Truncate(time.Millisecond)}
			decided := runner.DecisionRecord{Thread: thread, Call: "0.1", Tool: "lookup", By: "U2", Kind: agent.Approve, At: now.UTC().Truncate(time.Millisecond)}
			l := &runner.LastSave{Closing: runner.Closing{Thread: thread, Token: token, Answered: -1, Schedule: true, Wake: now.Add(time.Hour),
				Audit: []map[string]string{{"event": "decision", "tool": "lookup", "decision": "approve", "by": "U2", "thread": thread}},
				Keys:  []string{"decision:0.0#0"},
				Inbox: &runner.InboxUpdate{Thread: thread, Waiting: []runner.InboxEntry{waiting}, Decided: []runner.DecisionRecord{decided}}}}
			endSessionWithFirstSave(t, store, name == "cluster", firstCheckpoint(thread, "hello"), now.Add(time.Hour), l)
			entries, err := store.AuditEntries(ctx, "", time.Time{}, 10)
			if err != nil || len(entries) != 1 || entries[0].Fields["by"] != "U2" || entries[0].Fields["thread"] != thread {
				t.Errorf("audit entries = %v, %v; want the close's one", entries, err)
			}
			if report, err := store.VerifyAudit(ctx); err != nil || report.Entries != 1 {
				t.Errorf("VerifyAudit = %+v, %v; want 1 entry verified", report, err)
			}
			inbox, err := store.InboxEntries(ctx)
			if err != nil || !slices.ContainsFunc(inbox, func(e runner.InboxEntry) bool { return e.Thread == thread && e.Call == "0.0" && e.Tool == "deploy" }) {
				t.Errorf("inbox = %v, %v; want the waiting call", inbox, err)
			}
			if recent, err := store.RecentDecisions(ctx, "U2", 10); err != nil || len(recent) != 1 || recent[0].Call != "0.1" {
				t.Errorf("U2's recent decisions = %v, %v; want the one recorded", recent, err)
			}
			if tok, err := store.AcquireLease(ctx, thread, "B", time.Minute); tok == "" || err != nil {
				t.Errorf("AcquireLease after the session ended = %q, %v; want the lease free", tok, err)
			}
		})
	}
}

// firstSaveReplies is whether f's save took the lease, and the replies
// it handed over.
func firstSaveReplies(f *runner.FirstSave) (bool, []string) {
	var out []string
	for _, r := range f.Replies() {
		out = append(out, string(r))
	}
	return f.Taken(), out
}

// TestKeptRepliesAreCapped: a flood of replies in a thread that has no
// checkpoint (one that is not a conversation, or is starting) keeps only
// the latest 20, and the first save hands over those, in order.
func TestKeptRepliesAreCapped(t *testing.T) {
	t.Parallel()
	for name, rdb := range everyRedis() {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := redisstore.New(rdb(t), redisstore.Options{Prefix: uniqueName("keptcap")})
			thread := uniqueName("T1:C1")
			var want []string
			for i := range 50 {
				reply := fmt.Sprintf("reply %d", i)
				if kept, err := store.KeepReply(ctx, thread, []byte(reply), time.Minute); err != nil || kept != runner.KeptReply {
					t.Fatalf("KeepReply %d = %v, %v; want kept", i, kept, err)
				}
				if i >= 30 {
					want = append(want, reply)
				}
			}
			f, err := firstSave(ctx, store, firstCheckpoint(thread, "hello"), runner.NewLeaseToken("A"), time.Now().Add(time.Hour), nil)
			if err != nil || !f.Taken() {
				t.Fatalf("first save = %v (taken %v)", err, f.Taken())
			}
			if _, replies := firstSaveReplies(f); !slices.Equal(replies, want) {
				t.Errorf("the first save handed over %q, want the latest 20: %q", replies, want)
			}
		})
	}
}

// TestTakeBackReply: the intake's last look at a kept reply takes it back
// from what the first save hands over while the thread has no head, so
// that a start saving after it does not hand over a reply given up; the
// other replies stay kept. A thread with a head is reported started, and
// nothing changes. On every kind of Redis the store runs on.
func TestTakeBackReply(t *testing.T) {
	t.Parallel()
	for name, rdb := range everyRedis() {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store := redisstore.New(rdb(t), redisstore.Options{Prefix: uniqueName("takeback")})
			thread := uniqueName("T1:C1")
			for _, r := range []string{"one", "two", "one"} {
				if kept, err := store.KeepReply(ctx, thread, []byte(r), time.Minute); err != nil || kept != runner.KeptReply {
					t.Fatalf("KeepReply(%s) = %v, %v; want kept", r, kept, err)
				}
			}
			if started, err := store.TakeBackReply(ctx, thread, []byte("one")); err != nil || started {
				t.Fatalf("TakeBackReply(no head) = %v, %v; want taken back", started, err)
			}
			first := firstCheckpoint(thread, "hello")
			f, err := firstSave(ctx, store, first, runner.NewLeaseToken("A"), time.Now().Add(time.Hour), nil)
			if err != nil || !f.Taken() {
				t.Fatalf("first save = %v (taken %v)", err, f.Taken())
			}
			if took, replies := firstSaveReplies(f); !took || !slices.Equal(replies, []string{"two"}) {
				t.Errorf("the first save handed over %q, want only the reply not taken back", replies)
			}
			if started, err := store.TakeBackReply(ctx, thread, []byte("two")); err != nil || !started {
				t.Errorf("TakeBackReply(a thread with a head) = %v, %v; want started", started, err)
			}
		})
	}
}

// endSessionWithFirstSave keeps a reply ("one") for l's thread, then
// makes cp the thread's first save, ending the session as l says, and
// checks that the save took the thread and handed over the kept reply.
// On a Redis Cluster, where the first save does not end the session
// itself, it ends it with CloseThread.
func endSessionWithFirstSave(t *testing.T, store *redisstore.Store, cluster bool, cp *graph.Checkpoint, refresh time.Time, l *runner.LastSave) {
	t.Helper()
	ctx := t.Context()
	if kept, err := store.KeepReply(ctx, l.Closing.Thread, []byte("one"), time.Minute); err != nil || kept != runner.KeptReply {
		t.Fatalf("KeepReply = %v, %v; want kept", kept, err)
	}
	f, err := firstSave(ctx, store, cp, l.Closing.Token, refresh, l)
	if err != nil || !f.Taken() {
		t.Fatalf("first save that ends the session = %v (taken %v)", err, f.Taken())
	}
	if took, replies := firstSaveReplies(f); !took || !slices.Equal(replies, []string{"one"}) {
		t.Errorf("the first save handed over %q, want the kept reply", replies)
	}
	if cluster {
		if _, err := store.CloseThread(ctx, l.Closing); err != nil {
			t.Fatal(err)
		}
	}
}
