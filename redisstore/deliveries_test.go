package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// roundTrips is a go-redis hook that counts what the client sends: a
// command alone or a pipeline, once each.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// refusals is a go-redis hook that counts the commands of pipelines that
// a server refused because it did not have their script (NOSCRIPT).
type refusals struct{ n atomic.Int64 }

func (r *refusals) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (r *refusals) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (r *refusals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				r.n.Add(1)
			}
		}
		return err
	}
}

// TestDeliveriesOfManyThreadsInOneRoundTrip: a process records what it
// showed in many threads with one round trip on a single server (two on a
// cluster, whose wake-ups are in a slot of their own), also when the
// server has forgotten its scripts; a thread whose claims Redis refuses
// (a key of another type) fails alone, and the others' are recorded.
func TestDeliveriesOfManyThreadsInOneRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		rdb        func(t *testing.T) redis.UniversalClient
		roundTrips int64
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }, 1},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.Cluster(t) }, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := tt.rdb(t)
			prefix := uniqueName("deliveries")
			store := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			const n = 50
			var ds []runner.Deliveries
			for i := range n {
				th := fmt.Sprintf("T1:C1:%d.1", i)
				if err := store.Wake(ctx, th, base); err != nil {
					t.Fatal(err)
				}
				ds = append(ds, runner.Deliveries{Thread: th, Record: []string{"card:x#0"}, Answered: 2,
					Move: true, WakeSet: base, Wake: base.Add(time.Hour)})
			}
			const broken = 7
			if err := rdb.Set(ctx, prefix+":{"+ds[broken].Thread+"}:claims", "not a hash", 0).Err(); err != nil {
				t.Fatal(err)
			}
			flush := func(c *redis.Client) error { return c.ScriptFlush(ctx).Err() }
			if cl, ok := rdb.(*redis.ClusterClient); ok {
				if err := cl.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return flush(c) }); err != nil {
					t.Fatal(err)
				}
			} else if err := flush(rdb.(*redis.Client)); err != nil {
				t.Fatal(err)
			}
			count := &roundTrips{}
			rdb.AddHook(count)
			refused := &refusals{}
			rdb.AddHook(refused)

			errs := store.RecordDeliveries(ctx, ds[:n/2])
			// On a cluster the nodes other than the first run's refuse
			// theirs, and they are sent again.
			if got := refused.n.Load(); got != 0 && tt.name == "single" {
				t.Errorf("the first batch on a server without the script: %d runs refused (NOSCRIPT); want none", got)
			}
			if len(errs) != n/2 || errs[broken] == nil {
				t.Fatalf("RecordDeliveries(first half) = %v; want the error of thread %d", errs, broken)
			}
			for i, err := range errs {
				if i != broken && err != nil {
					t.Errorf("thread %d: %v; want it recorded", i, err)
				}
			}
			// A server that forgets the script after the store has run it
			// refuses the runs: they are sent again.
			if single, ok := rdb.(*redis.Client); ok {
				if err := flush(single); err != nil {
					t.Fatal(err)
				}
			}
			count.n.Store(0)
			if errs := store.RecordDeliveries(ctx, ds[n/2:n-5]); errs != nil {
				t.Fatalf("RecordDeliveries(after the scripts were flushed) = %v", errs)
			}
			count.n.Store(0)
			if errs := store.RecordDeliveries(ctx, ds[n-5:]); errs != nil {
				t.Fatalf("RecordDeliveries(the last five) = %v", errs)
			}
			if got := count.n.Load(); got != tt.roundTrips {
				t.Errorf("%d threads' deliveries took %d round trips, want %d", 5, got, tt.roundTrips)
			}
			for i, d := range ds {
				if i == broken {
					continue
				}
				got, err := store.ClaimValues(ctx, d.Thread, []string{"card:x#0", "answered"})
				if err != nil || string(got["card:x#0"]) != "1" || string(got["answered"]) != "2" {
					t.Errorf("claims of thread %d = %q, %v; want its card and answer recorded", i, got, err)
				}
			}
			due, err := store.Due(ctx, base.Add(time.Minute), 2*n)
			if err != nil || len(due) != 1 || due[0] != ds[broken].Thread {
				t.Errorf("Due() before the planned wake-ups = %v, %v; want only thread %d's, which failed", due, err, broken)
			}
		})
	}
}
