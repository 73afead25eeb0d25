package agent_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

// BenchmarkPausedThreadsMemory fills a Redis server of its own with
// 10,000 threads paused on approvals, written by the real engine: a
// request, the model's turn with three calls (one already run), two calls
// pending, and the history of checkpoints that led there. It reports the
// server's memory for them (target: 10,000 paused threads in ≤ 25 MB):
//
//	MB/10k-paused  used_memory growth per 10,000 paused threads
//	x-target       that over 25 MB (≤ 1 meets the target)
//	bytes/thread   used_memory growth per thread
func BenchmarkPausedThreadsMemory(b *testing.B) {
	const threads = 10_000
	ctx := context.Background()
	srv := redistest.StartServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	store := redisstore.New(rdb, redisstore.Options{})
	f := newFixture(b, store, nil, true)

	for b.Loop() {
		_ = rdb.FlushAll(ctx).Err()
		before := usedMemory(b, rdb)
		for i := range threads {
			thread := fmt.Sprintf("T0TEAM:C0CHANNEL:17000%05d.000100", i)
			st := agent.NewState(thread, "U0ALICE", "C0CHANNEL", "please ship release v2.3.1 to production and clean up the old build")
			res, err := f.g.Start(ctx, thread, st, graph.RunConfig{})
			if err != nil || res.Status() != graph.Paused {
				b.Fatalf("Start(%s) = %v, %v", thread, res, err)
			}
		}
		grown := usedMemory(b, rdb) - before
		b.ReportMetric(float64(grown)/1e6*10_000/threads, "MB/10k-paused")
		b.ReportMetric(float64(grown)/1e6*10_000/threads/25, "x-target")
		b.ReportMetric(float64(grown)/threads, "bytes/thread")
	}
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}
