package cyclebench_test

import (
	"context"
	"testing"

	"github.com/countersign/countersign/internal/cyclebench"
)

// TestCycleCosts holds the approval cycle to its Redis budget, which a
// hook counts exactly whatever the machine's load: at most 6 round trips
// through the agent and the store, and at most 5 through runner.Service,
// whose last save of each run ends its session and whose click is
// claimed by the save that marks its call running (4 at turn 1, whose
// first save takes the thread's lease), and reads that do not grow with the conversation (turn 30 reads at
// most 3× what turn 1 does) — while every cycle still ends with the
// answer to its own turn.
func TestCycleCosts(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		impl       cyclebench.Impl
		maxTrips   int64
		firstTrips int64 // at turn 1; 0: maxTrips
		lastTurns  int
	}{
		{cyclebench.Agent, 6, 0, 30},
		{cyclebench.Runner, 5, 4, 30},
	}
	for _, tt := range tests {
		t.Run(string(tt.impl), func(t *testing.T) {
			m := new(cyclebench.Meter)
			rdb := meteredClient(t, m)
			prefix := "test-cycle-" + randomName()
			t.Cleanup(func() { _ = cyclebench.Cleanup(ctx, rdb, prefix) })
			c, err := cyclebench.New(tt.impl, rdb, prefix)
			if err != nil {
				t.Fatal(err)
			}
			// A first thread warms the scripts' cache in Redis, with a
			// first turn and a later one (a later turn's opening is not a
			// first turn's script); what it showed last is recorded
			// before the measured cycles.
			for range 2 {
				if _, err := c.Cycle(ctx, "warm"); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Settle(ctx); err != nil {
				t.Fatal(err)
			}
			var first cyclebench.Sample
			for turn := 1; turn <= tt.lastTurns; turn++ {
				s, _, err := c.Measure(ctx, m, "thread")
				if err != nil {
					t.Fatal(err)
				}
				if s.RoundTrips > tt.maxTrips {
					t.Errorf("turn %d: %d round trips, want at most %d", turn, s.RoundTrips, tt.maxTrips)
				}
				if turn == 1 && tt.firstTrips > 0 && s.RoundTrips > tt.firstTrips {
					t.Errorf("turn 1: %d round trips, want at most %d: a conversation's first save takes its lease, with no opening of its own", s.RoundTrips, tt.firstTrips)
				}
				if turn == 1 {
					first = s
				}
				if turn == tt.lastTurns && s.Read > 3*first.Read {
					t.Errorf("turn %d read %d bytes, turn 1 %d: want at most 3×", turn, s.Read, first.Read)
				}
			}
			// What the benchmark wrote goes with it: a run that left keys
			// behind would measure the next one on a fuller server.
			if err := c.Settle(ctx); err != nil {
				t.Fatal(err)
			}
			if err := cyclebench.Cleanup(ctx, rdb, prefix); err != nil {
				t.Fatal(err)
			}
			if left, err := rdb.Keys(ctx, "*"+prefix+"*").Result(); err != nil || len(left) > 0 {
				t.Errorf("after Cleanup, keys %q, %v; want none", left, err)
			}
		})
	}
}
