package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Requests to made-up paths under /slack/ add no series to /metrics:
// the acknowledgement histogram is labelled by a fixed set of routes.
func TestMetricsDoNotGrowWithPaths(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.command("help", nil, nil).Body.Close() // one real endpoint, for a series to compare with
	before := h.metrics()
	// A series per path, however many of them were kept, would show
	// from the second path on: n is not a load test.
	const n, workers = 6000, 8
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				path := fmt.Sprintf("/slack/%x/%d", rand.Uint64(), i)
				resp, err := client.Post("http://"+h.addr+path, "text/plain", strings.NewReader("x"))
				if err != nil {
					errc <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	after := h.metrics()
	if got, was := seriesOf(after, "countersign_slack_ack_seconds_count"), seriesOf(before, "countersign_slack_ack_seconds_count"); len(got) > len(was)+1 {
		t.Errorf("after %d requests to random paths /metrics has %d ack series, was %d: %q", n, len(got), len(was), got)
	}
	if len(after) > 2*len(before) {
		t.Errorf("/metrics grew from %d to %d bytes", len(before), len(after))
	}
	if !strings.Contains(after, `countersign_slack_ack_seconds_count{endpoint="other"}`) {
		t.Errorf("/metrics does not count the unknown paths as endpoint=\"other\":\n%s", strings.Join(seriesOf(after, "countersign_slack_ack_seconds_count"), "\n"))
	}
}

// metrics fetches /metrics.
func (h *harness) metrics() string {
	h.t.Helper()
	resp, err := botClient.Get("http://" + h.addr + "/metrics")
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return string(b)
}

// seriesOf lists the lines of a metric in Prometheus' text format.
func seriesOf(metrics, name string) []string {
	var lines []string
	for l := range strings.Lines(metrics) {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

// A request without signature headers is answered 401 before its body
// arrives, and its connection is closed: a client that sends a body
// slowly holds nothing.
func TestUnsignedSlowBodyIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	conn := h.rawRequest("POST /slack/commands HTTP/1.1\r\nHost: bot\r\nContent-Type: application/x-www-form-urlencoded\r\n" +
		"Content-Length: 1000000\r\n\r\ntext=dep")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to an unsigned request whose body has not arrived: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", resp.StatusCode)
	}
	h.waitClosed(conn, 10*time.Second)
}

// A signed request whose body does not arrive in time is cut off by the
// server's read timeout.
func TestSlowSignedBodyIsCutOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	conn := h.rawRequest("POST /slack/commands HTTP/1.1\r\nHost: bot\r\nContent-Type: application/x-www-form-urlencoded\r\n" +
		"X-Slack-Request-Timestamp: " + ts + "\r\nX-Slack-Signature: v0=00\r\nContent-Length: 1000000\r\n\r\ntext=dep")
	h.waitClosed(conn, readTimeout+10*time.Second)
	if n := len(h.slack.CallsTo("chat.postMessage")); n != 0 {
		t.Errorf("a request cut off was processed: %d messages", n)
	}
}

// rawRequest opens a connection to the bot and writes head to it.
func (h *harness) rawRequest(head string) net.Conn {
	h.t.Helper()
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head); err != nil {
		h.t.Fatal(err)
	}
	return conn
}

// waitClosed waits until the server closes conn, reading and dropping
// whatever it sends first.
func (h *harness) waitClosed(conn net.Conn, within time.Duration) {
	h.t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, conn)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		h.t.Fatalf("the bot kept the connection open for %s", within)
	}
}
