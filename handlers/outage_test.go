package handlers_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/tools"
)

// intakeCounter is the store, counting the intake's reads and those that
// failed.
type intakeCounter struct {
	*redisstore.Store
	reads, failed *atomic.Int64
}

func (c intakeCounter) DueIntake(ctx context.Context, token string, now, until time.Time, n int) (map[string][]byte, error) {
	due, err := c.Store.DueIntake(ctx, token, now, until, n)
	if err != nil {
		c.failed.Add(1)
	}
	c.reads.Add(1)
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

// intakeLines returns the hook's lines of the intake's loop, and any
// other line about its reads.
func intakeLines(hook *logtest.Hook) []*logrus.Entry {
	var out []*logrus.Entry
	for _, e := range hook.AllEntries() {
		if e.Data["loop"] == "intake" || strings.HasPrefix(e.Message, "reading accepted requests") {
			out = append(out, e)
		}
	}
	return out
}

// An operator stops Redis for a while, then starts it again. The
// intake's loop goes on trying at its pace, and the log says the outage
// once when it begins, once a minute while it lasts, and once when Redis
// answers again — not a line an attempt.
func TestIntakeLogsARedisOutageOnceAndItsEnd(t *testing.T) {
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

	policy, err := tools.ParsePolicy([]byte("tools:\n  deploy: {approval: required, approvers: [U0BOB]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, &agenttest.Tool{ToolName: "deploy"})
	if err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(rdb, redisstore.Options{Prefix: fmt.Sprintf("outage-%d", time.Now().UnixNano())})
	a, err := agent.New(&agenttest.Planner{}, reg, store, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := slacktest.NewServer(t)
	api := slack.New("xoxb-test", slack.OptionAPIURL(fake.URL()))
	svc := runner.New(a, store, handlers.NewReporter(api, store, nil, nil), runner.Options{})
	var reads, failed atomic.Int64
	s := handlers.New(api, svc, intakeCounter{store, &reads, &failed}, gateSecret,
		handlers.Options{BotUserID: slacktest.BotUserID, Now: clock, Logger: log})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.RunIntake(ctx, 5*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })

	waitState(t, "a read of the intake", func() bool { return reads.Load() >= 2 })
	if lines := intakeLines(hook); len(lines) != 0 {
		t.Fatalf("the intake's loop logged %q while Redis answered", lines[0].Message)
	}

	srv.Kill()
	waitState(t, "failed reads", func() bool { return failed.Load() >= 5 })
	lines := intakeLines(hook)
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
	lines = intakeLines(hook)
	if len(lines) != 2 {
		t.Fatalf("a minute into the outage the loop has logged %d lines, want 2 (its start, one reminder)", len(lines))
	}
	if r := lines[1]; r.Level != logrus.WarnLevel || r.Data["down_for"] != "1m1s" || r.Data["attempts"].(int) < 2 {
		t.Errorf("the reminder is logged at %v with %v, want a warning with down_for 1m1s and the attempts", r.Level, r.Data)
	}

	srv.Restart()
	waitState(t, "the outage's end to be logged", func() bool { return len(intakeLines(hook)) >= 3 })
	reads0 := reads.Load()
	waitState(t, "more reads", func() bool { return reads.Load() >= reads0+5 })
	lines = intakeLines(hook)
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
