package bot_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// deployTool counts its calls and never touches the network.
type deployTool struct{ calls *atomic.Int64 }

func (deployTool) Name() string                    { return "deploy" }
func (deployTool) Description() string             { return "Deploy a version." }
func (deployTool) Schema() json.RawMessage         { return json.RawMessage(`{"type":"object"}`) }
func (deployTool) Idempotent(json.RawMessage) bool { return false }
func (d deployTool) Call(context.Context, json.RawMessage) (string, error) {
	d.calls.Add(1)
	return "deployed", nil
}

// cards keeps the cards and answers the front end was shown.
type cards struct {
	mu      sync.Mutex
	waiting []agent.Call
	answers []string
}

func (c *cards) Report(_ context.Context, e runner.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.Kind {
	case runner.ApprovalNeeded:
		c.waiting = append(c.waiting, *e.Call)
	case runner.Answer:
		c.answers = append(c.answers, e.Text)
	}
	return nil
}

// seen returns the cards and the answers so far.
func (c *cards) seen() ([]agent.Call, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]agent.Call(nil), c.waiting...), append([]string(nil), c.answers...)
}

// newBot wires a bot on REDIS_URL (or, without it, the test Redis of
// redistest), under a prefix of its own, with the planner model and the
// counting deploy tool.
func newBot(t *testing.T, rep runner.Reporter, calls *atomic.Int64) *bot.Bot {
	t.Helper()
	return newBotAt(t, testRedisURL(t), "bot-test-"+randomHex(), rep, calls)
}

// testRedisURL is REDIS_URL or, without it, the test Redis of redistest.
func testRedisURL(t *testing.T) string {
	if url := os.Getenv("REDIS_URL"); url != "" {
		return url
	}
	return "redis://" + redistest.Options(t).Addr + "/0"
}

// newBotAt is newBot on the Redis at url, under prefix.
func newBotAt(t *testing.T, url, prefix string, rep runner.Reporter, calls *atomic.Int64) *bot.Bot {
	t.Helper()
	getenv := func(k string) string {
		if k == "REDIS_URL" {
			return url
		}
		return os.Getenv(k)
	}
	policy, err := tools.ParsePolicy([]byte("tools:\n  deploy: {approval: required}\n"))
	if err != nil {
		t.Fatal(err)
	}
	model := &agenttest.Planner{Plan: func(string) []llm.ToolCall {
		return []llm.ToolCall{{Name: "deploy", Arguments: `{}`}}
	}}
	log := logrus.New()
	log.Out = io.Discard
	b, err := bot.New(context.Background(), getenv, log, func(*redisstore.Store) runner.Reporter { return rep },
		bot.Options{Model: model, Policy: policy, Tools: []tools.Tool{deployTool{calls}}, Prefix: prefix})
	if err != nil {
		t.Fatalf("bot.New: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestNewRunsAnApprovedCallOnceAudited: through the wiring, a call that
// needs approval waits with a card, runs exactly once when approved, and
// its execution is in the audit trail before its outcome — the runner's
// check before a call is wired without anyone passing it by hand.
func TestNewRunsAnApprovedCallOnceAudited(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	ctx := context.Background()
	var calls atomic.Int64
	rep := &cards{}
	b := newBot(t, rep, &calls)
	if err := b.Runner.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatal(err)
	}
	waiting, _ := rep.seen()
	if len(waiting) != 1 || calls.Load() != 0 {
		t.Fatalf("after the request: %d cards, deploy ran %d times; want 1 card and no run", len(waiting), calls.Load())
	}
	c := waiting[0]
	err := b.Runner.Decide(ctx, runner.Decision{Thread: "th", Call: c.Key, Round: c.Attempts, Hash: c.RunHash(), By: "U_BOB", Kind: agent.Approve})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Runner.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if _, answers := rep.seen(); calls.Load() != 1 || len(answers) != 1 {
		t.Fatalf("after the approval: deploy ran %d times, %d answers; want once and one answer", calls.Load(), len(answers))
	}
	log, err := b.Store.AuditLog(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	var events []string // oldest first
	for i := len(log) - 1; i >= 0; i-- {
		if log[i]["tool"] == "deploy" {
			events = append(events, log[i]["event"])
		}
	}
	executed := -1
	for i, e := range events {
		if e == "execution" {
			executed = i
		}
	}
	if executed < 0 || executed == len(events)-1 {
		t.Errorf("audit events of the deploy: %v; want its execution, then its outcome", events)
	}
}

// TestNewKeepsTailLoads: the checkpoint store the wiring gives the agent,
// metrics wrapper included, is still a graph.TailLoader, so that a long
// thread's steps load its journal's tail, not the whole of it.
func TestNewKeepsTailLoads(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	var calls atomic.Int64
	b := newBot(t, &cards{}, &calls)
	if _, ok := b.Checkpoints.(graph.TailLoader); !ok {
		t.Fatalf("the wired checkpoint store %T is not a graph.TailLoader", b.Checkpoints)
	}
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
