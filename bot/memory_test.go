package bot_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackui"
)

// pausedBytesBound is what a paused thread may keep in Redis, in bytes
// of MEMORY USAGE: its own keys and its share of the wake-ups and the
// inbox (about 1,510 today). (Besides, the server's tables of keys
// and of expiries take about 85 bytes per key; BenchmarkPausedThreadsThroughSlack
// in cmd/bot measures used_memory.)
const pausedBytesBound = 1600

// TestPausedThreadsStayWithinTheirBytes: threads paused on an approval
// through the bot's wiring and its Slack reporter (card posted, its
// token claimed) keep at most pausedBytesBound bytes each in Redis, in
// three keys of their own (no card reference of its own). 200 threads,
// so that the shared hashes have the encoding of many (bytes, not
// timings).
func TestPausedThreadsStayWithinTheirBytes(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	if os.Getenv("REDIS_URL") == "" {
		t.Skip("REDIS_URL is not set")
	}
	const threads = 200
	ctx := context.Background()
	prefix := "bot-paused-" + randomHex()
	b, sl, calls := deployBot(t, prefix, nil)

	const team, channel = "T0TEAM0001", "C0CHANNEL01"
	for i := range threads {
		thread := slackui.ThreadKey(team, channel, fmt.Sprintf("17000%05d.000100", i))
		if err := b.Runner.Start(ctx, runner.StartRequest{Thread: thread, Requester: "U0ALICE", Team: team, Channel: channel,
			Text: fmt.Sprintf("ship v2 (%d)", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(sl.CallsTo("chat.postMessage")); n != threads || calls.Load() != 0 {
		t.Fatalf("%d cards posted, deploy ran %d times; want %d cards and no run", n, calls.Load(), threads)
	}

	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	var keys []string
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	var total int64
	own := map[string]int{}
	for _, k := range keys {
		n, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		total += n
		kind := k
		if i, j := strings.Index(k, "{"), strings.LastIndex(k, "}"); i >= 0 && j > i && strings.Contains(k[i:j], ":") {
			kind = k[:i] + "{T}" + k[j+1:]
		} else if strings.HasPrefix(k, prefix+":ref:") {
			kind = prefix + ":ref:*"
		}
		own[kind]++
	}
	perThread := float64(total) / threads
	t.Logf("%d paused threads keep %d bytes (%.0f a thread) in %d keys: %v", threads, total, perThread, len(keys), own)
	if perThread > pausedBytesBound {
		t.Errorf("a paused thread keeps %.0f bytes of MEMORY USAGE; want at most %d", perThread, pausedBytesBound)
	}
	for kind, n := range own {
		if n > threads {
			t.Errorf("%d keys %s for %d paused threads; want at most one a thread", n, kind, threads)
		}
	}
	if shared := len(keys) - 3*threads; shared > 2 {
		t.Errorf("%d keys for %d paused threads (%v); want 3 a thread (journal, history, claims with the card's token) and the wake-ups and inbox", len(keys), threads, own)
	}
}
