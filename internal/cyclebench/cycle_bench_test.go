package cyclebench_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/internal/cyclebench"
	"github.com/countersign/countersign/redisstore/redistest"
)

// meteredClient returns a client of the test Redis that m meters.
func meteredClient(tb testing.TB, m *cyclebench.Meter) *redis.Client {
	tb.Helper()
	opts := redistest.Options(tb)
	m.Instrument(opts)
	rdb := redis.NewClient(opts)
	rdb.AddHook(m)
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// BenchmarkCycle measures the approval cycle (see the package doc) at
// turns 1, 10, 50 and 100 of a conversation, through the agent and the
// store alone and through runner.Service. One op is one cycle at that
// turn (to a tenth more: each grown conversation serves a few). Metrics,
// per cycle:
//
//	cycles/s        cycles per second of measured time
//	p50-ms, p99-ms  cycle latency
//	round-trips     Redis round trips (a command or a pipeline is one)
//	B-written       bytes written to Redis
//	B-read          bytes read from Redis
//
// Timings depend on the machine; round trips and bytes do not. The
// side-by-side comparison with CloudWeGo Eino is .ci/perf-vs-eino.
func BenchmarkCycle(b *testing.B) {
	for _, impl := range []cyclebench.Impl{cyclebench.Agent, cyclebench.Runner} {
		for _, turn := range cyclebench.Marks(100) {
			b.Run(fmt.Sprintf("%s/turn=%d", impl, turn), func(b *testing.B) {
				benchmarkCycle(b, impl, turn)
			})
		}
	}
}

func benchmarkCycle(b *testing.B, impl cyclebench.Impl, turn int) {
	ctx := context.Background()
	m := new(cyclebench.Meter)
	rdb := meteredClient(b, m)
	prefix := "bench-cycle-" + randomName()
	b.Cleanup(func() { _ = cyclebench.Cleanup(ctx, rdb, prefix) })
	c, err := cyclebench.New(impl, rdb, prefix)
	if err != nil {
		b.Fatal(err)
	}
	// Threads that have had turn-1 cycles, ready for measured ones; each
	// serves turns turn to turn+turn/10, and a new set is grown when they
	// are used up, outside the measured time.
	uses := max(1, turn/10)
	var ready []string
	grown := 0
	grow := func() {
		b.StopTimer()
		defer b.StartTimer()
		for range 8 {
			thread := fmt.Sprintf("t%d", grown)
			grown++
			for range turn - 1 {
				if _, err := c.Cycle(ctx, thread); err != nil {
					b.Fatal(err)
				}
			}
			for range uses {
				ready = append(ready, thread)
			}
		}
	}
	var samples []cyclebench.Sample
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(ready) == 0 {
			grow()
		}
		thread := ready[0]
		ready = ready[1:]
		s, got, err := c.Measure(ctx, m, thread)
		if err != nil {
			b.Fatal(err)
		}
		if got < turn || got > turn+uses {
			b.Fatalf("measured turn %d, want %d to %d", got, turn, turn+uses)
		}
		samples = append(samples, s)
	}
	b.StopTimer()
	st := cyclebench.Summarize(samples)
	b.ReportMetric(st.CPS, "cycles/s")
	b.ReportMetric(float64(st.P50)/1e6, "p50-ms")
	b.ReportMetric(float64(st.P99)/1e6, "p99-ms")
	b.ReportMetric(st.RoundTrips, "round-trips")
	b.ReportMetric(st.Written, "B-written")
	b.ReportMetric(st.Read, "B-read")
}

// BenchmarkLongThread drives threads of 100 turns, each turn a whole
// cycle (reply → card → approve → tool → answer), through the bot's own
// wiring (bot.New, via a runner Cycler), and reports per turn at turns 1,
// 10, 50 and 100 (tN- metrics, also logged as a table):
//
//	cmds            Redis commands sent (a script is one)
//	rt              Redis round trips (a command or a pipeline is one)
//	B-sent, B-recv  bytes written to Redis and read from it
//	p50-ms, p99-ms  turn latency
//
// and the growth from turn 1 to turn 100 of commands and bytes each way
// (x-cmds, x-sent, x-recv). Commands, round trips and bytes are exact
// whatever the machine's load; one op is 8 threads grown to 100 turns.
func BenchmarkLongThread(b *testing.B) {
	const turns, threads = 100, 8
	ctx := context.Background()
	m := new(cyclebench.Meter)
	rdb := meteredClient(b, m)
	prefix := "bench-long-" + randomName()
	b.Cleanup(func() { _ = cyclebench.Cleanup(ctx, rdb, prefix) })
	c, err := cyclebench.New(cyclebench.Runner, rdb, prefix)
	if err != nil {
		b.Fatal(err)
	}
	// A first thread warms the scripts' cache in Redis.
	if _, err := c.Cycle(ctx, "warm"); err != nil {
		b.Fatal(err)
	}
	marks := cyclebench.Marks(turns)
	at := map[int][]cyclebench.Sample{}
	round := 0
	for b.Loop() {
		for turn := 1; turn <= turns; turn++ {
			for j := range threads {
				s, got, err := c.Measure(ctx, m, fmt.Sprintf("long/%d/%d", round, j))
				if err != nil {
					b.Fatal(err)
				}
				if got != turn {
					b.Fatalf("measured turn %d, want %d", got, turn)
				}
				if slices.Contains(marks, turn) {
					at[turn] = append(at[turn], s)
				}
			}
		}
		round++
	}
	b.Logf("%5s %8s %6s %9s %9s %8s %8s", "turn", "commands", "rt", "B sent", "B recv", "p50 ms", "p99 ms")
	stats := map[int]cyclebench.Stats{}
	for _, turn := range marks {
		st := cyclebench.Summarize(at[turn])
		stats[turn] = st
		b.Logf("%5d %8.1f %6.1f %9.0f %9.0f %8.3f %8.3f", turn, st.Commands, st.RoundTrips, st.Written, st.Read, ms(st.P50), ms(st.P99))
		t := "t" + strconv.Itoa(turn) + "-"
		b.ReportMetric(st.Commands, t+"cmds")
		b.ReportMetric(st.RoundTrips, t+"rt")
		b.ReportMetric(st.Written, t+"B-sent")
		b.ReportMetric(st.Read, t+"B-recv")
		b.ReportMetric(ms(st.P50), t+"p50-ms")
		b.ReportMetric(ms(st.P99), t+"p99-ms")
	}
	first, last := stats[1], stats[turns]
	b.ReportMetric(last.Commands/first.Commands, "x-cmds")
	b.ReportMetric(last.Written/first.Written, "x-sent")
	b.ReportMetric(last.Read/first.Read, "x-recv")
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// BenchmarkPausedThreadsThroughRunner fills a Redis server of its own
// with 10,000 threads paused on an approval, started through the bot's
// wiring (bot.New) as the bot starts them: besides the checkpoints, each
// thread's claims, its wake-up and its inbox entry.
// It reports the server's memory for them (target: ≤ 20 MB):
//
//	MB/10k-paused  used_memory growth per 10,000 paused threads
//	bytes/thread   used_memory growth per thread
//
// and prints MEMORY USAGE summed by kind of key, largest first.
func BenchmarkPausedThreadsThroughRunner(b *testing.B) {
	const threads = 10_000
	ctx := context.Background()
	srv := redistest.StartServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	// The server syncs every write to its append-only file: that takes
	// time, not memory, and this measures memory.
	if err := rdb.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		b.Fatal(err)
	}
	c, err := cyclebench.New(cyclebench.Runner, rdb, "cs")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		_ = rdb.FlushAll(ctx).Err()
		// One thread first, so that the scripts are loaded and the
		// indexes exist before memory is read.
		if err := c.Pause(ctx, "T0TEAM:C0CHANNEL:1699999999.000100"); err != nil {
			b.Fatal(err)
		}
		before := usedMemory(b, rdb)
		statsBefore, err := cyclebench.ReadMemoryStats(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}
		for i := range threads {
			if err := c.Pause(ctx, fmt.Sprintf("T0TEAM:C0CHANNEL:17000%05d.000100", i)); err != nil {
				b.Fatal(err)
			}
		}
		grown := usedMemory(b, rdb) - before
		statsAfter, err := cyclebench.ReadMemoryStats(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(grown)/1e6*10_000/threads, "MB/10k-paused")
		b.ReportMetric(float64(grown)/threads, "bytes/thread")
		kinds, err := cyclebench.MemoryByKind(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Printf("%d paused threads through bot.New: used_memory grew %.2f MB (%.0f B a thread); MEMORY USAGE by kind of key:\n%s"+
			"and besides the keys (MEMORY STATS, growth and per thread):\n%s",
			threads, float64(grown)/1e6, float64(grown)/threads, cyclebench.PrintMemory(kinds, threads+1),
			cyclebench.PrintOverhead(statsBefore, statsAfter, threads))
	}
}

func usedMemory(tb testing.TB, rdb *redis.Client) int64 {
	tb.Helper()
	n, err := cyclebench.UsedMemory(context.Background(), rdb)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
