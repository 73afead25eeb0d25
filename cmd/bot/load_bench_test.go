package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/slacksim/slacktest"
)

// BenchmarkSlackAck is the load generator for the acknowledgement target
// (p99 ≤ 50 ms at 200 requests/s on a 2-core machine). It runs the real
// bot binary on a Redis server of its own with the offline demo model,
// and sends signed slash commands open-loop at a fixed rate — each one
// posts a root message and runs a conversation in the background, as in
// production — measuring the time from sending a request to its answer.
//
//	p50-ms, p99-ms, max-ms  acknowledgement latency
//	x-target                p99 over 50 ms (≤ 1 meets the target)
//	req/s                   the rate actually sent
//
// Flags: -ack.rate (default 200) and -ack.seconds (default 10).
func BenchmarkSlackAck(b *testing.B) {
	h := newHarness(b, "")
	h.stop()
	h.env = append(h.env, "LLM_PROVIDER=demo", "LOG_LEVEL=warn")
	h.start()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

	for b.Loop() {
		total := *ackRate * *ackSeconds
		latencies := make([]time.Duration, total)
		var wg sync.WaitGroup
		interval := time.Second / time.Duration(*ackRate)
		start := time.Now()
		for i := range total {
			// Open loop: request i goes at its time whatever the others do.
			time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := slacktest.SlashCommand(url.Values{"text": {fmt.Sprintf("hello number %d", i)}, "user_id": {requester}})
				req := h.signer.Request(http.MethodPost, "http://"+h.addr+"/slack/commands", "application/x-www-form-urlencoded", body, time.Now())
				sent := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Errorf("request %d: %v", i, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				latencies[i] = time.Since(sent)
				if resp.StatusCode != http.StatusOK {
					b.Errorf("request %d: status %d", i, resp.StatusCode)
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		slices.Sort(latencies)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		p99 := latencies[len(latencies)*99/100]
		b.ReportMetric(ms(latencies[len(latencies)/2]), "p50-ms")
		b.ReportMetric(ms(p99), "p99-ms")
		b.ReportMetric(ms(latencies[len(latencies)-1]), "max-ms")
		b.ReportMetric(ms(p99)/50, "x-target")
		b.ReportMetric(float64(total)/elapsed.Seconds(), "req/s")
	}
}
