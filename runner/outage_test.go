package runner_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// dueCounter is the store, counting the schedule's reads and those that
// failed.
type dueCounter struct {
	runner.Store
	reads, failed *atomic.Int64
}

func (d dueCounter) Due(ctx context.Context, now time.Time, n int) ([]string, error) {
	due, err := d.Store.Due(ctx, now, n)
	if err != nil {
		d.failed.Add(1)
	}
	d.reads.Add(1)
	return due, err
}

// waitState waits until cond holds, polling; it fails the test after a
// generous deadline.
func waitState(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// scheduleLines returns the hook's lines of the schedule's loop, and any
// other line about its reads.
func scheduleLines(hook *logtest.Hook) []*logrus.Entry {
	var out []*logrus.Entry
	for _, e := range hook.AllEntries() {
		if e.Data["loop"] == "schedule" || strings.HasPrefix(e.Message, "reading the schedule") {
			out = append(out, e)
		}
	}
	return out
}

// An operator stops Redis for a while, then starts it again. The
// schedule's loop goes on trying at its pace, and the log says the
// outage once when it begins, once a minute while it lasts (how long, how
// many attempts failed), and once when Redis answers again — not a line
// an attempt.
func TestScheduleLogsARedisOutageOnceAndItsEnd(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })

	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	log := logrus.New()
	log.Out = io.Discard
	hook := logtest.NewLocal(log)
	var reads, failed atomic.Int64
	w := world{rdb: rdb, prefix: "runner-outage-" + randomHex(), schedule: true, log: log,
		leases: func(s *redisstore.Store) runner.Store { return dueCounter{s, &reads, &failed} }}
	svc, _ := w.build(t, nil, time.Second, clock)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.RunSchedule(ctx, 5*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })

	waitState(t, "a read of the schedule", func() bool { return reads.Load() >= 2 })
	if lines := scheduleLines(hook); len(lines) != 0 {
		t.Fatalf("the schedule's loop logged %q while Redis answered", lines[0].Message)
	}

	srv.Kill()
	waitState(t, "failed reads", func() bool { return failed.Load() >= 5 })
	lines := scheduleLines(hook)
	if len(lines) != 1 {
		t.Fatalf("%d failed reads logged %d lines, want 1 (the outage's first failure)", failed.Load(), len(lines))
	}
	if lines[0].Level != logrus.WarnLevel || lines[0].Data[logrus.ErrorKey] == nil {
		t.Errorf("the first failure is logged at %v with %v, want a warning with the error", lines[0].Level, lines[0].Data)
	}

	// A minute on, one reminder says how long and how many attempts.
	advance(runner.OutageRemind + time.Second)
	before := failed.Load()
	waitState(t, "failed reads after a minute", func() bool { return failed.Load() >= before+3 })
	lines = scheduleLines(hook)
	if len(lines) != 2 {
		t.Fatalf("a minute into the outage the loop has logged %d lines, want 2 (its start, one reminder)", len(lines))
	}
	if r := lines[1]; r.Level != logrus.WarnLevel || r.Data["down_for"] != "1m1s" || r.Data["attempts"].(int) < 2 {
		t.Errorf("the reminder is logged at %v with %v, want a warning with down_for 1m1s and the attempts", r.Level, r.Data)
	}

	srv.Restart()
	waitState(t, "the outage's end to be logged", func() bool { return len(scheduleLines(hook)) >= 3 })
	reads0 := reads.Load()
	waitState(t, "more reads", func() bool { return reads.Load() >= reads0+5 })
	lines = scheduleLines(hook)
	if len(lines) != 3 {
		t.Fatalf("the loop logged %d lines over the outage, want 3", len(lines))
	}
	end := lines[2]
	if end.Message != "Redis answers again" || end.Level != logrus.InfoLevel || end.Data["down_for"] != "1m1s" {
		t.Errorf("the outage's end is logged as %q at %v with %v, want \"Redis answers again\" at info with down_for", end.Message, end.Level, end.Data)
	}
	if n, ok := end.Data["attempts"].(int); !ok || int64(n) != failed.Load() {
		t.Errorf("the outage's end says %v attempts failed, want the %d reads that failed", end.Data["attempts"], failed.Load())
	}
}

// killingModel stops Redis when the model is first asked: the run's
// next save finds it down.
type killingModel struct {
	llm.Model
	srv  *redistest.Server
	once sync.Once
}

func (m *killingModel) Generate(ctx context.Context, msgs []llm.Message, defs []llm.ToolDef) (llm.Message, error) {
	m.once.Do(m.srv.Kill)
	return m.Model.Generate(ctx, msgs, defs)
}

// Redis is stopped mid-run: the run's save fails, and so does the save
// of its failure. The operator reads the save's error once in the line
// that says the run could not be saved, and so does the thread.
func TestAFailedSaveIsLoggedOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	tg := newTarget(t)
	log := logrus.New()
	log.Out = io.Discard
	hook := logtest.NewLocal(log)
	w := world{rdb: rdb, prefix: "runner-savefail-" + randomHex(), base: tg.URL, log: log}
	w.model = &killingModel{Model: &agenttest.Planner{Plan: plan(w.base)}, srv: srv}
	rep := &recorder{}
	svc, _ := w.service(t, rep, time.Second)

	err := svc.Start(context.Background(), runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"})
	if err == nil {
		t.Fatal("Start() = nil with Redis stopped before the run's second save")
	}
	// The save's error, said once: one "save checkpoint", one cause.
	once := func(where, text string) {
		t.Helper()
		if strings.Count(text, "save checkpoint") != 1 || strings.Count(text, "connection refused") != 1 {
			t.Errorf("%s says the save's error more than once, or not at all:\n%s", where, text)
		}
	}
	once("Start's error", err.Error())
	var logged bool
	for _, e := range hook.AllEntries() {
		if e.Message != "run could not be saved" {
			continue
		}
		logged = true
		if err, ok := e.Data[logrus.ErrorKey].(error); !ok {
			t.Errorf("%q logged without its error: %v", e.Message, e.Data)
		} else {
			once("the log line", err.Error())
		}
	}
	if !logged {
		t.Error("no line says that the run could not be saved")
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	for _, e := range rep.events {
		if e.Kind == runner.RunFailed {
			once("the thread's failure", e.Text)
		}
	}
}
