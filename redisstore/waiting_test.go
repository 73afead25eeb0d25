package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// On a cluster a close writes the thread's waiting count after it has
// released the lease, in another slot. When that write is late, another
// replica may have taken the thread, settled its calls and closed in
// between: the late write of the earlier holder must not put back the
// calls it saw waiting (the Home tab and the waiting-calls gauge would
// count them for good) — nor, the other way round, clear the count of
// calls the later holder left waiting.
func TestLateCloseKeepsTheNextHoldersWaitingCount(t *testing.T) {
	rdb := redistest.Cluster(t).(*redis.ClusterClient)
	tests := []struct {
		name      string
		aWaiting  int // what A's late close writes
		bWaiting  int // what B's close, before it, wrote
		wantTotal int
	}{
		{"settled since", 1, 0, 0},
		{"left waiting since", 0, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			prefix := uniqueName("late-waiting")
			thread := uniqueName("T1:C1")
			waiting := prefix + ":waiting"
			const lease = 10 * time.Second

			// A is another replica, with a client of its own whose write
			// of the waiting count the test holds back.
			opts := *rdb.Options()
			rdbA := redis.NewClusterClient(&opts)
			t.Cleanup(func() { rdbA.Close() })
			hold := newHoldHook(waiting)
			rdbA.AddHook(hold)
			a := redisstore.New(rdbA, redisstore.Options{Prefix: prefix})
			b := redisstore.New(rdb, redisstore.Options{Prefix: prefix})

			opened, err := a.OpenThread(ctx, runner.Opening{Thread: thread, Owner: "replica-a", TTL: lease,
				WakeIfHeld: time.Now().Add(lease)})
			if err != nil || !opened.Held {
				t.Fatalf("A: OpenThread = %+v, %v; want the lease", opened, err)
			}
			close(hold.armed)
			closed := make(chan error, 1)
			go func() {
				_, err := a.CloseThread(ctx, runner.Closing{Thread: thread, Token: opened.Token, Answered: -1,
					Schedule: true, Wake: time.Now().Add(time.Hour), Waiting: tt.aWaiting})
				closed <- err
			}()
			select {
			case <-hold.held:
			case err := <-closed:
				t.Fatalf("A: CloseThread returned (%v) without writing the waiting count", err)
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}

			// B takes the thread A released, decides what it holds and
			// closes.
			got, err := b.ClaimDecision(ctx, runner.DecisionClaim{Thread: thread, Key: "decision:c1", Value: []byte("approve"),
				WakeBy: time.Now().Add(lease), LeaseOwner: "replica-b", LeaseTTL: lease})
			if err != nil || !got.Won || !got.Leased {
				t.Fatalf("B: ClaimDecision = %+v, %v; want the claim and the lease", got, err)
			}
			var bWake time.Time
			if tt.bWaiting > 0 {
				bWake = time.Now().Add(2 * time.Hour)
			}
			if _, err := b.CloseThread(ctx, runner.Closing{Thread: thread, Token: got.Token, Answered: -1,
				Schedule: true, Wake: bWake, Waiting: tt.bWaiting}); err != nil {
				t.Fatalf("B: CloseThread = %v", err)
			}

			// A's write arrives.
			close(hold.release)
			if err := <-closed; err != nil {
				t.Fatalf("A: CloseThread = %v", err)
			}
			if n, err := b.WaitingTotal(ctx); err != nil || n != tt.wantTotal {
				t.Errorf("WaitingTotal after A's late close = %d, %v; want B's %d", n, err, tt.wantTotal)
			}
		})
	}
}
