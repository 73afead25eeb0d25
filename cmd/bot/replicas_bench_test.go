package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/slacksim/slacktest"
)

var (
	replicaCycles = flag.Int("replicas.cycles", 120, "approval cycles that BenchmarkReplicas runs per replica count")
	replicaConc   = flag.Int("replicas.concurrency", 24, "conversations BenchmarkReplicas keeps going at once")
)

// BenchmarkReplicas is the load generator for the throughput of approval
// cycles through the real binary: 1, 2 and 3 replicas of the bot on one
// Redis server, the Slack fake and the offline demo model. It keeps
// -replicas.concurrency conversations going at once, -replicas.cycles in
// all, each a whole cycle as people make it: "/agent check <url>" sent to
// one replica, the approval card, a click on Approve sent to the next
// replica, the tool's GET, the answer in the thread. Metrics:
//
//	cycles/s        completed cycles per second
//	ack-p50-ms      acknowledgement latency of the commands and clicks
//	ack-p99-ms
//
// Timings depend on the machine; run it where nothing else runs.
func BenchmarkReplicas(b *testing.B) {
	for _, n := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) { benchmarkReplicas(b, n) })
	}
}

func benchmarkReplicas(b *testing.B, n int) {
	h := newHarness(b, "")
	h.stop()
	env := append(slices.Clone(h.env), "LLM_PROVIDER=demo", "LOG_LEVEL=warn")
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = freeAddr(b)
		startBot(b, env, addrs[i], h.logs)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	send := func(addr, path string, body []byte) (time.Duration, error) {
		req := h.signer.Request(http.MethodPost, "http://"+addr+path, "application/x-www-form-urlencoded", body, time.Now())
		sent := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("%s: status %d", path, resp.StatusCode)
		}
		return time.Since(sent), nil
	}
	round := 0
	for b.Loop() {
		round++
		var mu sync.Mutex
		var acks []time.Duration
		var wg sync.WaitGroup
		slots := make(chan struct{}, *replicaConc)
		start := time.Now()
		for i := range *replicaCycles {
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				item := fmt.Sprintf("%s/item/%d-%d/x", h.target.URL, round, i)
				d1, err := send(addrs[i%n], "/slack/commands", slacktest.SlashCommand(url.Values{"text": {"check " + item}, "user_id": {requester}}))
				if err != nil {
					b.Error(err)
					return
				}
				root, ok := waitFor(func() (slacktest.Call, bool) {
					for _, c := range h.slack.CallsTo("chat.postMessage") {
						if c.OK() && c.ThreadTS == "" && strings.Contains(c.Text, item) {
							return c, true
						}
					}
					return slacktest.Call{}, false
				})
				if !ok {
					b.Errorf("no root message for %s", item)
					return
				}
				card, ok := waitFor(func() (slacktest.Call, bool) {
					for _, c := range h.slack.Messages(root.Channel, root.TS) {
						if hasAction(c, "approve") {
							return c, true
						}
					}
					return slacktest.Call{}, false
				})
				if !ok {
					b.Errorf("no card for %s", item)
					return
				}
				click := slacktest.BlockActions(slacktest.Click{
					User: approver, Channel: card.Channel, MessageTS: card.TS, ThreadTS: card.ThreadTS,
					ActionID: "approve", Value: buttonValue(b, card, "approve"),
				})
				d2, err := send(addrs[(i+1)%n], "/slack/interactions", click)
				if err != nil {
					b.Error(err)
					return
				}
				want := "ok GET " + strings.TrimPrefix(item, h.target.URL)
				if _, ok := waitFor(func() (slacktest.Call, bool) {
					for _, c := range h.slack.Messages(root.Channel, root.TS) {
						if !hasAction(c, "approve") && strings.Contains(c.Text, want) {
							return c, true
						}
					}
					return slacktest.Call{}, false
				}); !ok {
					b.Errorf("no answer for %s", item)
					return
				}
				mu.Lock()
				acks = append(acks, d1, d2)
				mu.Unlock()
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		if len(acks) == 0 {
			b.Fatal("no cycle completed")
		}
		slices.Sort(acks)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(float64(len(acks)/2)/elapsed.Seconds(), "cycles/s")
		b.ReportMetric(ms(acks[len(acks)/2]), "ack-p50-ms")
		b.ReportMetric(ms(acks[len(acks)*99/100]), "ack-p99-ms")
	}
}

// waitFor polls find until it finds something, for up to 30 seconds.
func waitFor(find func() (slacktest.Call, bool)) (slacktest.Call, bool) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if c, ok := find(); ok {
			return c, true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return slacktest.Call{}, false
}

// startBot runs one more replica of the bot listening on addr, stopped
// when the benchmark ends.
func startBot(tb testing.TB, env []string, addr string, logs io.Writer) {
	tb.Helper()
	cmd := exec.Command(botBinary)
	cmd.Env = append(slices.Clone(env), "BOT_ADDR="+addr)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if resp, err := botClient.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("a replica did not come up on %s", addr)
}
