package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
)

// What the observer is told shows on /metrics, whether its series were
// made at the start (the usual statuses, kinds, offered tools and
// endpoints) or first met later (a status outside them, an MCP server's
// tool, a made-up path).
func TestObservedEventsAreExported(t *testing.T) {
	t.Parallel()
	m := New(nil, Options{Tools: []string{"http_request"}})
	m.RunStarted(false)
	m.RunStarted(true)
	m.RunStopped(graph.Paused)
	m.RunStopped(graph.Done)
	m.RunStopped(graph.Done)
	m.RunStopped(graph.Running)
	m.Decided(agent.Approve, 30*time.Second)
	m.Decided(agent.Answer, 0)
	m.ToolFinished("http_request", agent.Done)
	m.ToolFinished("files__read", agent.Failed)
	m.ToolFinished("files__read", agent.Failed)
	m.ModelCalled(time.Second, &llm.Usage{Input: 120, Output: 7}, nil)
	m.ModelCalled(time.Second, nil, errors.New("provider down"))
	ok := m.Instrument(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, path := range []string{"/slack/commands", "/slack/commands", "/made-up"} {
		ok.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, path, nil))
	}

	page := scrape(t, m)
	for _, want := range []string{
		`countersign_runs_started_total 1`,
		`countersign_runs_resumed_total 1`,
		`countersign_runs_stopped_total{status="paused"} 1`,
		`countersign_runs_stopped_total{status="done"} 2`,
		`countersign_runs_stopped_total{status="failed"} 0`,
		`countersign_runs_stopped_total{status="running"} 1`,
		`countersign_decisions_total{kind="approve"} 1`,
		`countersign_decisions_total{kind="reject"} 0`,
		`countersign_decisions_total{kind="` + agent.Answer.String() + `"} 1`,
		`countersign_approval_wait_seconds_count 1`,
		`countersign_tool_executions_total{outcome="done",tool="http_request"} 1`,
		`countersign_tool_executions_total{outcome="failed",tool="http_request"} 0`,
		`countersign_tool_executions_total{outcome="failed",tool="files__read"} 2`,
		`countersign_model_call_seconds_count{outcome="ok"} 1`,
		`countersign_model_call_seconds_count{outcome="error"} 1`,
		`countersign_model_tokens_total{kind="input"} 120`,
		`countersign_model_tokens_total{kind="output"} 7`,
		`countersign_slack_ack_seconds_count{endpoint="/slack/commands"} 2`,
		`countersign_slack_ack_seconds_count{endpoint="/slack/events"} 0`,
		`countersign_slack_ack_seconds_count{endpoint="other"} 1`,
	} {
		if !strings.Contains(page, "\n"+want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(page, "/made-up") {
		t.Error("/metrics has a series of a made-up path")
	}
}

// scrape returns m's page as Prometheus reads it.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// BenchmarkObserver is what the metrics add to one approval cycle: two
// runs, a decision, a tool execution and two model calls.
func BenchmarkObserver(b *testing.B) {
	m := New(nil, Options{Tools: []string{"http_request"}})
	b.ReportAllocs()
	for b.Loop() {
		m.RunStarted(false)
		m.ModelCalled(time.Millisecond, nil, nil)
		m.RunStopped(graph.Paused)
		m.Decided(agent.Approve, time.Second)
		m.RunStarted(true)
		m.ToolFinished("http_request", agent.Done)
		m.ModelCalled(time.Millisecond, nil, nil)
		m.RunStopped(graph.Done)
	}
}

// The count of waiting calls is a number only when it was counted: while
// Redis does not answer, the scrape goes on without it (a gap a
// dashboard shows, absent() alerts on), and it is back once Redis is.
func TestPendingApprovalsWithoutRedis(t *testing.T) {
	t.Parallel()
	var down bool
	now := time.Now()
	m := New(func(context.Context) (int, error) {
		if down {
			return 0, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
		}
		return 3, nil
	}, Options{Now: func() time.Time { return now }})
	if page := scrape(t, m); !strings.Contains(page, "\ncountersign_pending_approvals 3\n") {
		t.Errorf("/metrics with Redis up lacks countersign_pending_approvals 3:\n%s", page)
	}
	down = true
	now = now.Add(pendingFresh)
	page := scrape(t, m)
	if strings.Contains(page, "\ncountersign_pending_approvals ") {
		t.Errorf("/metrics with Redis down has a pending count it could not count:\n%s", grepLines(page, "countersign_pending_approvals"))
	}
	if !strings.Contains(page, "\ncountersign_runs_started_total 0\n") {
		t.Error("/metrics with Redis down lacks the other series")
	}
	down = false
	now = now.Add(pendingFresh)
	if page := scrape(t, m); !strings.Contains(page, "\ncountersign_pending_approvals 3\n") {
		t.Error("/metrics lacks countersign_pending_approvals once Redis is back")
	}
}

// TestPendingApprovalsAreNotCountedPerRequest: /metrics answers whoever
// reaches the bot's port, and the count of waiting calls reads the whole
// inbox. Someone who sends it a flood of requests, at once and one after
// another, costs Redis one count per pendingFresh, not one a request;
// every answer has the count, and a count taken later sees a change.
func TestPendingApprovalsAreNotCountedPerRequest(t *testing.T) {
	t.Parallel()
	var counts atomic.Int64
	var mu sync.Mutex
	now, waiting := time.Now(), 3
	m := New(func(context.Context) (int, error) {
		counts.Add(1)
		mu.Lock()
		defer mu.Unlock()
		return waiting, nil
	}, Options{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	get := func() string {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Error(err)
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 4 {
				if page := get(); !strings.Contains(page, "\ncountersign_pending_approvals 3\n") {
					t.Errorf("an answer lacks countersign_pending_approvals 3: %s", grepLines(page, "pending"))
				}
			}
		})
	}
	wg.Wait()
	if n := counts.Load(); n != 1 {
		t.Errorf("200 requests counted the waiting calls %d times, want once", n)
	}
	mu.Lock()
	now, waiting = now.Add(pendingFresh), 4
	mu.Unlock()
	if page := get(); !strings.Contains(page, "\ncountersign_pending_approvals 4\n") || counts.Load() != 2 {
		t.Errorf("once the count is %s old: %d counts, and %s; want 2, and the new count 4", pendingFresh, counts.Load(), grepLines(page, "pending"))
	}
}

// grepLines returns the lines of page that contain s.
func grepLines(page, s string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
