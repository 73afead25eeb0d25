package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// TestClaimWhoseAnswerIsCut: the answer to an Approve's claim is lost on
// the way back from Redis, after Redis wrote it, and go-redis sends the
// claim again. The retry finds the claim its first attempt wrote: that
// is this click's own decision, not someone else's — the person is not
// told "already approved", and the call runs, once.
func TestClaimWhoseAnswerIsCut(t *testing.T) {
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
