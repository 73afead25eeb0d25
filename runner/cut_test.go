package runner_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// TestClaimWhoseAnswerIsCut: the answer to an Approve's claim is lost on
// the way back from Redis, after Redis wrote it, and go-redis sends the
// claim again. The retry finds the claim its first attempt wrote: that
// is this click's own decision, not someone else's — the person is not
// told "already approved", and the call runs, once.
func TestClaimWhoseAnswerIsCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tg := newTarget(t)
	rdb, cutter := redistest.CutClient(t, "U0CUTME")
	w := world{rdb: rdb, prefix: "runner-cut-" + randomHex(), base: tg.URL}
	svc, _ := w.service(t, nil, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatal(err)
	}
	deploy := waitingCall(t, svc, "th", "deploy")
	cutter.Arm()
	err := svc.Decide(ctx, decision("th", deploy, agent.Approve, "U0CUTME"))
	if cutter.Cuts() != 1 {
		t.Fatalf("%d answers were cut, want 1: the test does not test anything", cutter.Cuts())
	}
	if err != nil {
		t.Fatalf("Decide(approve) with the claim's answer cut = %v, want nil: the retry found its own claim", err)
	}
	if _, err := finish(ctx, svc, "th", "U_BOB", agent.Approve, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
}

// TestClaimWithTheSaveWhoseAnswerIsCut: the save that claims a click's
// decision and marks its call running (DecideAndDrive) runs in Redis,
// and its answer is lost on the way back; go-redis sends the script
// again. The retry finds its own first attempt — the claim is this
// decision's, the head is this save's checkpoint, the lease holds this
// save's token — and answers as that attempt did: the person is told
// the decision is recorded, the card shows who approved the call and
// then its result, the call runs once, and the audit trail has the
// decision and the execution once each. Taken for a crash, the call
// saved running would be shown as "outcome unknown" and wait for a
// person to settle it.
func TestClaimWithTheSaveWhoseAnswerIsCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := oneCallWorld(t)
	rdb, cutter := redistest.CutClient(t, "U0CUTME")
	w.rdb = rdb
	rep := &recorder{}
	svc, _ := w.service(t, rep, 5*time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatal(err)
	}
	c := waitingCall(t, svc, "th", "deploy")
	cutter.Arm()
	got, err := decideAndDrive(svc, tg, decision("th", c, agent.Approve, "U0CUTME"))
	if cutter.Cuts() != 1 {
		t.Fatalf("%d answers were cut, want 1: the test does not test anything", cutter.Cuts())
	}
	if err != nil || got.err != nil {
		t.Fatalf("DecideAndDrive() with the save's answer cut = %v, told %v; want nil, nil", err, got.err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
	var started, finished bool
	rep.mu.Lock()
	events := slices.Clone(rep.events)
	rep.mu.Unlock()
	for _, e := range events {
		switch {
		case e.Kind == runner.CallStarted && e.Call != nil && e.Call.Decision != nil:
			started = e.Call.Decision.By == "U0CUTME" && e.Call.Decision.Kind == agent.Approve
		case e.Kind == runner.CallFinished && e.Call != nil:
			finished = started
		case e.Kind == runner.ApprovalNeeded && started:
			t.Errorf("the call was shown waiting again (%+v) after it started: taken for a crash", e.Call)
		}
	}
	if !started || !finished {
		t.Errorf("events %q: want the call started, approved by U0CUTME, then finished", rep.kinds())
	}
	res, err := svc.State(ctx, "th")
	if err != nil || res.Status() != graph.Done {
		t.Fatalf("State() = %v, %v; want done", res, err)
	}
	want := []string{"decision deploy approve", "execution deploy", "outcome deploy done"}
	if got := trail(t, w); !slices.Equal(got, want) {
		t.Errorf("trail = %q\nwant %q", got, want)
	}
}
