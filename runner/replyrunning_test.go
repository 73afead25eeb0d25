package runner_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
)

// openSpy tells once when its service asks for a thread's lease.
type openSpy struct {
	*redisstore.Store
	asked chan struct{}
	once  *sync.Once
}

func (o openSpy) OpenThread(ctx context.Context, op runner.Opening) (runner.Opened, error) {
	o.once.Do(func() { close(o.asked) })
	return o.Store.OpenThread(ctx, op)
}

// A reply typed while the thread's run still works — a streamed answer is
// read in Slack before the run saves it — waits for the run to let go and
// is taken then, not refused as busy.
func TestReplyWhileTheRunWorksWaitsForIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := policyWorld(t)
	inCall, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.beforeCall = func(_ context.Context, c agent.Call) {
		if c.Tool == "lookup" {
			once.Do(func() { close(inCall); <-release })
		}
	}
	svc, _ := w.service(t, nil, 30*time.Second)
	started := make(chan error, 1)
	go func() {
		started <- svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U0ALICE", Team: "T1", Channel: "C1", Text: "ship"})
	}()
	<-inCall // the run works: its lookup is under way, the thread's lease held

	asked := make(chan struct{})
	w.beforeCall = nil
	w.leases = func(s *redisstore.Store) runner.Store { return openSpy{s, asked, &sync.Once{}} }
	other, _ := w.service(t, nil, 30*time.Second)
	replied := make(chan error, 1)
	go func() {
		replied <- other.Reply(ctx, runner.Message{Thread: "th", Team: "T1", Channel: "C1", By: "U0ALICE", Text: "and the release notes?"})
	}()
	select {
	case err := <-replied:
		close(release)
		t.Fatalf("Reply() while the run worked = %v, want it to wait for the run", err)
	case <-asked: // the reply waits for the lease
	}
	close(release)
	if err := <-started; err != nil {
		t.Fatalf("Start() = %v", err)
	}
	var refused *runner.RefusedError
	if err := <-replied; errors.Is(err, runner.ErrBusy) || (err != nil && !errors.As(err, &refused)) {
		t.Fatalf("Reply() once the run paused = %v, want it taken", err)
	}
	if n := tg.Count("GET /lookup"); n != 1 {
		t.Errorf("lookup ran %d times, want 1", n)
	}
}
