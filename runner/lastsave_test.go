package runner_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// cards counts the approval cards rep was asked to show for tool.
func (r *recorder) cards(tool string) int {
	n := 0
	for _, e := range r.eventsOf(runner.ApprovalNeeded) {
		if e.Call != nil && e.Call.Tool == tool {
			n++
		}
	}
	return n
}

// TestClickOnAnotherReplicaBeforeTheCardsAreRecorded: a run pauses on
// two calls in one replica, whose last save let go of the lease before
// it showed their cards; the records that it showed them are still in
// that replica when a click on one card reaches another replica. That
// replica applies the decision and the run pauses again on the other
// call: its card, which the first replica showed, is not shown again.
func TestClickOnAnotherReplicaBeforeTheCardsAreRecorded(t *testing.T) {
	defer runner.SetRecordAfter(time.Hour)()
	ctx := context.Background()
	w, tg := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	w.schedule = true
	repA, repB := &recorder{}, &recorder{}
	a, _ := w.service(t, repA, 5*time.Second)
	b, _ := w.service(t, repB, 5*time.Second)
	if err := a.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatal(err)
	}
	if n, m := repA.cards("deploy"), repA.cards("delete"); n != 1 || m != 1 {
		t.Fatalf("the first replica showed %d deploy and %d delete cards, want one each", n, m)
	}
	if !leaseFreeIn(t, w, "th") {
		t.Fatal("the pause's save did not let go of the lease")
	}
	deploy := waitingCall(t, a, "th", "deploy")
	if err := b.Decide(ctx, decision("th", deploy, agent.Approve, "U_BOB")); err != nil {
		t.Fatal(err)
	}
	if err := b.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Fatalf("deploy ran %d times, want 1", n)
	}
	waitingCall(t, b, "th", "delete")
	if n := repB.cards("delete"); n != 0 {
		t.Errorf("the replica that applied the click showed the delete card %d times, which the first one showed", n)
	}
	// Once the first replica has recorded what it showed, nobody shows
	// it again.
	if err := a.FlushRecords(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n := repA.cards("delete") + repB.cards("delete"); n != 1 {
		t.Errorf("the delete card was shown %d times, want once", n)
	}
}

// TestReplyOnAnotherReplicaBeforeTheAnswerIsRecorded: a run answers in
// one replica, whose last save let go of the lease before it showed the
// answer; a reply reaches another replica before the first has recorded
// that it showed it. The new turn waits for that record instead of
// showing the answer again: each answer is shown once.
func TestReplyOnAnotherReplicaBeforeTheAnswerIsRecorded(t *testing.T) {
	defer runner.SetRecordAfter(time.Hour)()
	ctx := context.Background()
	w, _ := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	repA, repB := &recorder{}, &recorder{}
	a, _ := w.service(t, repA, 5*time.Second)
	b, _ := w.service(t, repB, 5*time.Second)
	if err := a.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "chat: hello"}); err != nil {
		t.Fatal(err)
	}
	if got := repA.answers(); len(got) != 1 {
		t.Fatalf("the first replica showed %q, want one answer", got)
	}
	// The first replica records what it showed once the other has begun
	// the new turn (it holds the thread's lease while it waits).
	recorded := make(chan error, 1)
	go func() {
		for {
			n, err := w.rdb.Exists(ctx, leaseKey(w, "th")).Result()
			if err != nil || n == 1 {
				if err == nil {
					err = a.FlushRecords(ctx)
				}
				recorded <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	if err := b.Reply(ctx, runner.Message{Thread: "th", By: "U_ALICE", Text: "chat: thanks"}); err != nil {
		t.Fatalf("Reply() = %v", err)
	}
	if err := <-recorded; err != nil {
		t.Fatal(err)
	}
	if got := repB.answers(); len(got) != 1 || got[0] != "You said: chat: thanks" {
		t.Errorf("the replica that took the reply showed %q, want only the answer to the reply", got)
	}
}

// TestKilledBeforeShowingWhatItSaved: a replica saves a pause — the save
// ends its session and lets go of the lease — and dies before showing
// the cards. The save set the thread's wake-up soon, and the replica
// that wakes it then shows them.
func TestKilledBeforeShowingWhatItSaved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	w.schedule = true
	victim := startReplica(t, w, "card-then-die", "CHILD_THREAD=th", "CHILD_SCHEDULE=1")
	if l := victim.line(t); l != "CARD" {
		t.Fatalf("victim said %q, want CARD", l)
	}
	saved := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	if !leaseFreeIn(t, w, "th") {
		t.Fatal("the pause's save did not let go of the lease")
	}
	score, err := w.rdb.ZScore(ctx, w.prefix+":wakeups", "th").Result()
	if err != nil {
		t.Fatalf("the thread has no wake-up: %v", err)
	}
	at := time.UnixMilli(int64(score))
	if limit := saved.Add(31 * time.Second); at.After(limit) {
		t.Fatalf("the thread wakes at %v, %v after its pause was saved; want within the recovery delay", at, at.Sub(saved))
	}
	// The schedule's tick of the thread, once due, shows both cards.
	rep := &recorder{}
	heir, _ := w.service(t, rep, processLease)
	if err := heir.Tick(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n, m := rep.cards("deploy"), rep.cards("delete"); n != 1 || m != 1 {
		t.Errorf("the replica woken showed %d deploy and %d delete cards, want one each", n, m)
	}
}

// leaseFreeIn reports whether nobody holds the thread's lease.
func leaseFreeIn(t *testing.T, w world, thread string) bool {
	t.Helper()
	n, err := w.rdb.Exists(context.Background(), leaseKey(w, thread)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 0
}
