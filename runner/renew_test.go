package runner_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
)

// countedRenewals is the store that tells renewed of each renewal of a
// lease that found it held.
type countedRenewals struct {
	*redisstore.Store
	renewed func()
}

func (c countedRenewals) RenewLease(ctx context.Context, thread, token string, ttl time.Duration) (bool, error) {
	ok, err := c.Store.RenewLease(ctx, thread, token, ttl)
	if ok && err == nil {
		c.renewed()
	}
	return ok, err
}

// TestLongRunKeepsItsLease: a run works longer than its lease — the
// lookup is held until the lease has been renewed three times, more than
// a lease's worth — and keeps the thread all along: the lease is renewed
// every third of it for as long as the run works. Another replica's drive
// meanwhile leaves the thread alone; the lookup runs once, and the run
// goes on to deploy's card.
func TestLongRunKeepsItsLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	const lease = 1500 * time.Millisecond
	var renewals atomic.Int64
	renewedThrice := make(chan struct{})
	w.leases = func(s *redisstore.Store) runner.Store {
		return countedRenewals{s, func() {
			if renewals.Add(1) == 3 {
				close(renewedThrice)
			}
		}}
	}
	other, _ := w.service(t, nil, lease)
	var otherErr error
	w.beforeCall = func(_ context.Context, c agent.Call) {
		if c.Tool != "lookup" {
			return
		}
		select {
		case <-renewedThrice:
		case <-time.After(30 * time.Second):
			t.Errorf("the lease was renewed %d times in 30s while the run worked, want 3 and more", renewals.Load())
			return
		}
		otherErr = other.Drive(context.Background(), "th") // the lease is held: nothing to do
	}
	svc, _ := w.service(t, nil, lease)

	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatalf("Start() of a run longer than its lease = %v", err)
	}
	if otherErr != nil {
		t.Errorf("another replica's Drive() while the run worked = %v", otherErr)
	}
	if n := tg.Count("GET /lookup"); n != 1 {
		t.Errorf("lookup ran %d times, want once: the run lost the thread while it worked", n)
	}
	waitingCall(t, svc, "th", "deploy")
}
