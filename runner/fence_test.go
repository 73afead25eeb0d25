package runner_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
)

// stalledRun marks the context of the run that stalls.
type stalledRun struct{}

func isStalled(ctx context.Context) bool { return ctx.Value(stalledRun{}) != nil }

var errStalled = errors.New("the run is stalled")

// stallingLeases is the store with the stalled run's renewals cut off
// while stalled is set: as when its process stops (a pause of the
// collector, a frozen VM), its lease lapses while it waits.
type stallingLeases struct {
	*redisstore.Store
	stalled *atomic.Bool
}

func (s stallingLeases) RenewLease(ctx context.Context, thread, token string, ttl time.Duration) (bool, error) {
	if s.stalled.Load() && isStalled(ctx) {
		return false, errStalled
	}
	return s.Store.RenewLease(ctx, thread, token, ttl)
}

// savesAfter counts the stalled run's saves that went through once it
// stalled.
type savesAfter struct {
	graph.Store
	stalled *atomic.Bool
	saved   *atomic.Int64
}

func (s savesAfter) Save(ctx context.Context, cp *graph.Checkpoint) error {
	err := s.Store.Save(ctx, cp)
	if err == nil && isStalled(ctx) && s.stalled.Load() {
		s.saved.Add(1)
	}
	return err
}

// TestStalledRunOfTheSameProcess: one process runs a thread twice. The
// first run saves its lookup as running and stalls, past its lease,
// right before sending it; the thread's lease lapses, and a later run of
// the same process — same service, same owner — takes it, re-runs the
// idempotent lookup and is still working when the first wakes up. The
// first must find that its acquisition of the lease is over, though its
// process holds the lease again: it does not send the lookup, saves
// nothing, and lets go of nothing the later run holds. The lookup runs
// once, and the run goes on to the end.
func TestStalledRunOfTheSameProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	var stalled, everStalled atomic.Bool
	var saved atomic.Int64
	w.leases = func(s *redisstore.Store) runner.Store { return stallingLeases{s, &stalled} }
	w.checkpoints = func(s graph.Store) graph.Store { return savesAfter{s, &everStalled, &saved} }

	firstAt, firstGo := make(chan struct{}), make(chan struct{})
	w.beforeCall = func(ctx context.Context, c agent.Call) {
		if isStalled(ctx) && c.Tool == "lookup" {
			stalled.Store(true)
			everStalled.Store(true)
			close(firstAt)
			<-firstGo
		}
	}
	laterAt, laterGo := make(chan struct{}), make(chan struct{})
	var once sync.Once
	rep := &recorder{}
	reporter := runner.ReporterFunc(func(ctx context.Context, e runner.Event) error {
		_ = rep.Report(ctx, e)
		if isStalled(ctx) || e.Kind != runner.CallFinished || e.Call == nil || e.Call.Tool != "lookup" {
			return nil
		}
		// The later run has run the lookup and holds the lease.
		once.Do(func() { close(laterAt) })
		<-laterGo
		return nil
	})
	svc, store := w.service(t, reporter, processLease)

	first := make(chan error, 1)
	go func() {
		first <- svc.Start(context.WithValue(ctx, stalledRun{}, true), runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"})
	}()
	waitFor(t, firstAt, "the first run to reach the lookup")

	// The later run takes the thread once the first run's lease is gone.
	endStalledLease(t, w, "th", processLease)
	later := make(chan error, 1)
	go func() {
		for {
			if err := svc.Drive(ctx, "th"); err != nil {
				later <- err
				return
			}
			select {
			case <-laterAt:
				later <- nil
				return
			case <-time.After(20 * time.Millisecond): // the first run's lease still holds
			}
		}
	}()
	waitFor(t, laterAt, "the later run to take the thread over and run the lookup")

	// The first run wakes up while the later one holds the lease.
	stalled.Store(false)
	close(firstGo)
	select {
	case err := <-first:
		if err != nil && !errors.Is(err, runner.ErrLeaseLost) && !errors.Is(err, graph.ErrConflict) {
			t.Errorf("first run: Start() = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first run did not stop")
	}
	if n := tg.Count("GET /lookup"); n != 1 {
		t.Errorf("lookup ran %d times, want once: the stalled run sent it again", n)
	}
	if n := saved.Load(); n != 0 {
		t.Errorf("the stalled run saved %d checkpoints after its lease lapsed, want none", n)
	}
	if tok, err := store.AcquireLease(ctx, "th", "a third run", time.Minute); tok != "" || err != nil {
		t.Errorf("AcquireLease(while the later run works) = %q, %v; want it held: the stalled run let go of the later run's lease", tok, err)
	}

	close(laterGo)
	if err := <-later; err != nil {
		t.Fatalf("later run: Drive() = %v", err)
	}
	if _, err := finish(ctx, svc, "th", "U_BOB", agent.Approve, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := []int{tg.Count("GET /lookup"), tg.Count("POST /deploy"), tg.Count("POST /delete")}; !slices.Equal(got, []int{1, 1, 0}) {
		t.Errorf("executions lookup/deploy/delete = %v, want [1 1 0]", got)
	}
	finished := 0
	for _, k := range rep.kinds() {
		if k == "call_finished lookup" {
			finished++
		}
	}
	if finished != 1 {
		t.Errorf("people were shown the lookup finish %d times, want once; events %v", finished, rep.kinds())
	}
	// The stalled run's save wrote the lookup's execution before the
	// stall; the trail says it was not sent.
	lookups := map[string]int{}
	for _, e := range trail(t, w) {
		if strings.Contains(e, " lookup") {
			lookups[e]++
		}
	}
	if want := map[string]int{"execution lookup": 2, "outcome lookup unsent": 1, "outcome lookup done": 1}; !maps.Equal(lookups, want) {
		t.Errorf("the lookup's trail = %v, want %v", lookups, want)
	}
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30s for %s", what)
	}
}
