package runner

import (
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
)

// A failed run whose approved call was not sent is retried by the
// schedule a bounded number of times, each later than the one before;
// then it shows as a failed run, for a person's Retry. Without a
// schedule nothing would retry it, so it shows at once.
func TestUnsentRetriesAreBounded(t *testing.T) {
	t.Parallel()
	failed := func(unsent int) *graph.Result[agent.State] {
		return &graph.Result[agent.State]{Checkpoint: &graph.Checkpoint{Status: graph.Failed},
			State: agent.State{Calls: []agent.Call{{Key: "0.1", Status: agent.Approved, Unsent: unsent}}}}
	}
	s := &Service{opts: Options{Schedule: true, Now: time.Now}}
	var last time.Duration
	for n := 1; n <= maxUnsentRetries; n++ {
		if got, auto := s.retriesUnsent(failed(n)); got != n || !auto {
			t.Errorf("retriesUnsent(unsent %d) = %d, %v; want %d, retried", n, got, auto, n)
		}
		if b := unsentBackoff(n); b <= last || b > time.Minute {
			t.Errorf("unsentBackoff(%d) = %v after %v; want longer, at most a minute", n, b, last)
		}
		last = unsentBackoff(n)
	}
	if _, auto := s.retriesUnsent(failed(maxUnsentRetries + 1)); auto {
		t.Errorf("retried after %d unsent attempts; want it left to a person", maxUnsentRetries+1)
	}
	if _, auto := s.retriesUnsent(failed(0)); auto {
		t.Error("a failed run whose calls were all sent is retried on its own")
	}
	if _, auto := (&Service{}).retriesUnsent(failed(1)); auto {
		t.Error("retried without a schedule to retry it")
	}
}
