package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/internal/cyclebench"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

var pausedThreads = flag.Int("paused.threads", 10_000, "threads BenchmarkPausedThreadsThroughSlack leaves paused")

// BenchmarkPausedThreadsThroughSlack is the memory target of DESIGN.md §7
// (10,000 paused threads in at most 20 MB of Redis) as the binary keeps
// them: -paused.threads (default 10,000) "/agent" commands, signed, to
// the bot binary with the Slack and model fakes, each a conversation
// whose call waits for approval with its card posted — root message,
// intake record, checkpoint, claims, wake-up, inbox entry and all. It
// reports the growth of the Redis server's used_memory:
//
//	MB/10k-paused   for 10,000 threads
//	bytes/thread    per thread
//	MB/10k-kept     the same less what expires within the hour the
//	                requests are remembered for repeats (the intake's
//	                records and tokens): what a thread paused for days
//	                costs
//
// and prints MEMORY USAGE summed by kind of key (the thread's name and
// IDs taken out of its name), largest first. BenchmarkPausedThreadsThroughRunner
// (internal/cyclebench) measures 10,000 through bot.New without Slack.
func BenchmarkPausedThreadsThroughSlack(b *testing.B) {
	n := *pausedThreads
	h := newHarness(b, "")
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	b.Cleanup(func() { rdb.Close() })
	// The harness' Redis syncs every write to its append-only file, which
	// takes the time, not the memory; this measures memory.
	if err := rdb.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		b.Fatal(err)
	}
	h.stop()
	h.env = append(h.env, "LOG_LEVEL=warn")
	h.start()
	ask := func(i int) {
		h.model.Then(llmtest.Reply("", call(fmt.Sprintf("call_%d", i), "GET", "https://status.example.com/health", "")))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	send := func(i int) error {
		body := url.Values{"text": {fmt.Sprintf("turn 1: is status.example.com healthy? (%d)", i)}, "user_id": {requester}}
		req := h.signer.Request(http.MethodPost, "http://"+h.addr+"/slack/commands", "application/x-www-form-urlencoded",
			slacktest.SlashCommand(body), time.Now())
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/agent answered %d", resp.StatusCode)
		}
		return nil
	}
	cards := func() int {
		k := 0
		for _, c := range h.slack.CallsTo("chat.postMessage") {
			if c.OK() && hasAction(c, "approve") {
				k++
			}
		}
		return k
	}
	// Waiting reads how many threads wait from Redis (the inbox has an
	// entry for each): reading the Slack fake's calls each time would
	// cost more the more there are.
	waitWaiting := func(want int) {
		for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(2 * time.Millisecond) {
			n, err := rdb.HLen(ctx, "cs:{inbox}:calls").Result()
			if err != nil {
				b.Fatal(err)
			}
			if n >= int64(want) {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d threads wait, want %d", n, want)
			}
		}
	}
	waitCards := func(want int) {
		waitWaiting(want)
		lt := &longThread{h: h, rdb: rdb}
		lt.settle()
		if got := cards(); got != want {
			b.Fatalf("%d cards posted, want %d", got, want)
		}
	}
	// One thread first, so that the scripts are loaded and the indexes
	// exist before memory is read.
	ask(-1)
	if err := send(-1); err != nil {
		b.Fatal(err)
	}
	waitCards(1)
	for b.Loop() {
		before := usedMemory(b, rdb)
		statsBefore, err := cyclebench.ReadMemoryStats(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			ask(i)
		}
		// Closed loop: at most 16 conversations under way at once. An
		// open loop piles requests up in the bot for longer than the
		// intake waits before it drives a request again (15 s), and a
		// request taken up twice starts two conversations.
		for i := range n {
			waitWaiting(i + 1 - 16)
			if err := send(i); err != nil {
				b.Fatal(err)
			}
		}
		waitCards(n + 1)
		grown := usedMemory(b, rdb) - before
		statsAfter, err := cyclebench.ReadMemoryStats(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}
		kinds, err := cyclebench.MemoryByKind(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}
		transient := int64(0)
		for _, k := range kinds {
			if strings.HasPrefix(k.Kind, "cs:{intake}:req:") || strings.HasPrefix(k.Kind, "cs:{intake}:tok:") {
				transient += k.Bytes
			}
		}
		b.ReportMetric(float64(grown)/1e6*10_000/float64(n), "MB/10k-paused")
		b.ReportMetric(float64(grown)/float64(n), "bytes/thread")
		b.ReportMetric(float64(grown-transient)/1e6*10_000/float64(n), "MB/10k-kept")
		fmt.Printf("%d paused threads through the binary: used_memory grew %.2f MB (%.0f B a thread) = %.2f MB per 10,000 "+
			"(%.2f MB kept past the intake's hour); MEMORY USAGE by kind of key, and expiries, as the last card is posted:\n%s"+
			"and besides the keys (MEMORY STATS, growth and per thread):\n%s",
			n, float64(grown)/1e6, float64(grown)/float64(n), float64(grown)/1e6*10_000/float64(n),
			float64(grown-transient)/1e6*10_000/float64(n), cyclebench.PrintMemory(kinds, n+1),
			cyclebench.PrintOverhead(statsBefore, statsAfter, n))
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
