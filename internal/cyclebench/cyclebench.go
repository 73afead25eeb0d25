// Package cyclebench measures one approval cycle — a user turn, the model
// asks for one tool call, the run pauses for approval, the call is
// approved, the tool runs, the model answers — against a real Redis, in two
// ways: through the agent's graph and the Redis store alone ("agent"), and
// through runner.Service with its leases, claims, audit, schedule and
// delivery records, wired by bot.New as the bot runs it ("runner").
//
// It reports, per cycle, the time taken (cycles/s, p50, p99), the Redis
// commands and round trips (counted by a go-redis hook: exact whatever the
// machine's load) and the bytes written to and read from Redis, at turns
// 1, 10, 50 and 100 of one conversation. The workload is the one of the CloudWeGo
// Eino comparison program (a scripted model, one http_request call, a
// fixed tool result), so the two can be set side by side; Summary lines
// have that program's format.
//
// The package is for benchmarks and the cyclebench command; nothing in the
// bot imports it.
package cyclebench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/internal/logtext"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// Impl names a way of running the cycle.
type Impl string

// The two ways.
const (
	// Agent: graph Start/Continue, then Resume with the approval, on
	// redisstore, with no service around it.
	Agent Impl = "agent"
	// Runner: runner.Service Start/Reply, then DecideAndDrive — the
	// bot's path, as the Slack handler takes a click.
	Runner Impl = "runner"
)

// ToolName is the one tool the model calls.
const ToolName = "http_request"

const (
	requester = "U0ALICE"
	approver  = "U0BOB"
	channel   = "C0CHANNEL"
	team      = "T0TEAM"
	toolArgs  = `{"method":"GET","url":"https://status.example.com/health"}`
)

// UserText is the user's message of turn n.
func UserText(n int) string { return fmt.Sprintf("turn %d: is status.example.com healthy?", n) }

// Counts is what a cycle cost Redis: round trips, bytes written to and
// read from it, and commands sent (a script is one).
type Counts struct {
	RoundTrips, Written, Read, Commands int64
}

// Cycler runs cycles of one Impl on threads of its own.
type Cycler struct {
	impl  Impl
	bot   *bot.Bot // Runner only
	svc   *runner.Service
	agent *agent.Agent
	store *redisstore.Store
	shown *shown
	turns map[string]int
}

// New returns a Cycler of impl whose data lives in rdb under prefix. A
// Runner cycler is the bot as bot.New wires it (metrics, inbox, schedule,
// audit and all), with the scripted model and the stand-in tool.
func New(impl Impl, rdb redis.UniversalClient, prefix string) (*Cycler, error) {
	policy, err := tools.ParsePolicy([]byte("tools:\n  " + ToolName + ": {approval: required}\n"))
	if err != nil {
		return nil, err
	}
	c := &Cycler{impl: impl, shown: &shown{}, turns: map[string]int{}}
	if impl == Runner {
		// Logged as the binary logs by default (LOG_FORMAT text, level
		// info): every line is formatted, then thrown away.
		log := logrus.New()
		log.Out = io.Discard
		log.Formatter = logtext.New()
		b, err := bot.New(context.Background(), func(string) string { return "" }, log,
			func(*redisstore.Store) runner.Reporter { return c.shown },
			bot.Options{Model: scriptedModel{}, Policy: policy, Tools: []tools.Tool{statusTool{}}, Redis: rdb, Prefix: prefix})
		if err != nil {
			return nil, err
		}
		c.bot, c.svc, c.store, c.agent = b, b.Runner, b.Store, b.Runner.Agent()
		return c, nil
	}
	reg, err := tools.NewRegistry(policy, statusTool{})
	if err != nil {
		return nil, err
	}
	c.store = redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	if c.agent, err = agent.New(scriptedModel{}, reg, c.store, agent.Options{}); err != nil {
		return nil, err
	}
	return c, nil
}

// Cycle runs the next turn's cycle on thread (turn 1 on a new thread) and
// checks that the answer is the one to that turn. It returns the turn.
func (c *Cycler) Cycle(ctx context.Context, thread string) (int, error) {
	turn := c.turns[thread] + 1
	var err error
	if c.impl == Runner {
		err = c.runnerCycle(ctx, thread, turn)
	} else {
		err = c.agentCycle(ctx, thread, turn)
	}
	if err != nil {
		return turn, fmt.Errorf("%s cycle %d of %s: %w", c.impl, turn, thread, err)
	}
	c.turns[thread] = turn
	return turn, nil
}

// Adopt takes up thread at turn turn: a thread another process (another
// Cycler on the same Redis and prefix, as another replica of the bot)
// has had turn turns of, that this one has not seen. The next Cycle on
// it is turn turn+1, and has to read the conversation from Redis.
func (c *Cycler) Adopt(thread string, turn int) { c.turns[thread] = turn }

// Settle writes now what the service holds to record with a thread's
// next step (runner.Service.FlushRecords), so that it is not written in
// the background while later cycles are measured.
func (c *Cycler) Settle(ctx context.Context) error {
	if c.svc == nil {
		return nil
	}
	return c.svc.FlushRecords(ctx)
}

func (c *Cycler) agentCycle(ctx context.Context, thread string, turn int) error {
	g := c.agent.Graph()
	var res *graph.Result[agent.State]
	var err error
	if turn == 1 {
		res, err = g.Start(ctx, thread, agent.NewState(thread, requester, channel, UserText(turn)), graph.RunConfig{})
	} else {
		res, err = g.Continue(ctx, thread, agent.UserTurn(requester, UserText(turn)))
	}
	if err != nil {
		return err
	}
	waiting := res.State.Waiting()
	if res.Status() != graph.Paused || len(waiting) != 1 {
		return fmt.Errorf("run stopped %s with %d calls waiting, want paused with 1", res.Status(), len(waiting))
	}
	call := waiting[0]
	d := agent.Decision{Kind: agent.Approve, By: approver, At: time.Now(), Hash: call.RunHash()}
	res, err = g.ResumeAt(ctx, thread, res.Checkpoint.ID, c.agent.Decide(map[string]agent.Decision{call.Key: d}))
	if err != nil {
		return err
	}
	return checkAnswer(res, turn)
}

// Pause starts a conversation on a new thread through runner.Service and
// leaves it paused, its call waiting for approval: what a thread costs
// while people have not decided yet.
func (c *Cycler) Pause(ctx context.Context, thread string) error {
	if c.impl != Runner {
		return fmt.Errorf("pause: %s cycles are not run through the service", c.impl)
	}
	err := c.svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: requester, Team: team, Channel: channel, Text: UserText(1)})
	if err != nil {
		return err
	}
	if _, ok := c.shown.takeCard(thread); !ok {
		return fmt.Errorf("pause %s: no call waits for approval", thread)
	}
	return nil
}

func (c *Cycler) runnerCycle(ctx context.Context, thread string, turn int) error {
	text := UserText(turn)
	var err error
	if turn == 1 {
		err = c.svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: requester, Team: team, Channel: channel, Text: text})
	} else {
		err = c.svc.Reply(ctx, runner.Message{Thread: thread, Team: team, Channel: channel, By: requester, Text: text})
	}
	if err != nil {
		return err
	}
	call, ok := c.shown.takeCard(thread)
	if !ok {
		return errors.New("no call waits for approval")
	}
	// The click as the Slack handler takes it: the decision and the
	// drive in one job, the person answered once the claim is.
	var decided error
	err = c.svc.DecideAndDrive(ctx, runner.Decision{
		Thread: thread, Call: call.Key, Round: call.Attempts, Hash: call.Hash,
		Team: team, Channel: channel, By: approver, Kind: agent.Approve,
	}, func(err error) { decided = err })
	if decided != nil {
		return decided
	}
	if err != nil {
		return err
	}
	return c.lastAnswer(thread, turn, text)
}

// lastAnswer checks that the thread's last answer is to turn, whose
// text was text.
func (c *Cycler) lastAnswer(thread string, turn int, text string) error {
	c.shown.mu.Lock()
	got := c.shown.answer[thread]
	c.shown.mu.Unlock()
	if !isAnswerTo(got, text) {
		return fmt.Errorf("answer %q is not to turn %d", got, turn)
	}
	return nil
}

// isAnswerTo reports whether answer quotes the user's text, as the
// scripted model's answers do (%q).
func isAnswerTo(answer, text string) bool { return strings.Contains(answer, strconv.Quote(text)) }

// shown is the front end: it keeps, per thread, the last card and the
// last answer it was shown — what a person would click and read.
type shown struct {
	mu     sync.Mutex
	card   map[string]agent.Call
	answer map[string]string
}

func (s *shown) Report(_ context.Context, e runner.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.card == nil {
		s.card, s.answer = map[string]agent.Call{}, map[string]string{}
	}
	switch e.Kind {
	case runner.ApprovalNeeded:
		s.card[e.Thread] = *e.Call
	case runner.Answer:
		s.answer[e.Thread] = e.Text
	}
	return nil
}

// takeCard returns and forgets the thread's last card.
func (s *shown) takeCard(thread string) (agent.Call, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.card[thread]
	delete(s.card, thread)
	return c, ok
}

func checkAnswer(res *graph.Result[agent.State], turn int) error {
	if res.Status() != graph.Done {
		return fmt.Errorf("run stopped %s, want done", res.Status())
	}
	if got := res.State.Answer(); !isAnswerTo(got, UserText(turn)) {
		return fmt.Errorf("answer %q is not to turn %d", got, turn)
	}
	return nil
}

// Sample is one measured cycle.
type Sample struct {
	Took time.Duration
	Counts
}

// Stats summarize samples.
type Stats struct {
	N                            int
	CPS                          float64 // cycles per second of the samples' total time
	Mean, P50, P99               time.Duration
	RoundTrips, Written, Read    float64 // per cycle
	Commands                     float64 // per cycle
	MaxRoundTrips, MinRoundTrips int64
}

// Summarize computes the stats of samples.
func Summarize(samples []Sample) Stats {
	s := Stats{N: len(samples)}
	if len(samples) == 0 {
		return s
	}
	d := make([]time.Duration, len(samples))
	var total time.Duration
	s.MinRoundTrips = math.MaxInt64
	for i, x := range samples {
		d[i] = x.Took
		total += x.Took
		s.RoundTrips += float64(x.RoundTrips)
		s.Written += float64(x.Written)
		s.Read += float64(x.Read)
		s.Commands += float64(x.Commands)
		s.MaxRoundTrips = max(s.MaxRoundTrips, x.RoundTrips)
		s.MinRoundTrips = min(s.MinRoundTrips, x.RoundTrips)
	}
	n := float64(len(samples))
	s.RoundTrips, s.Written, s.Read, s.Commands = s.RoundTrips/n, s.Written/n, s.Read/n, s.Commands/n
	s.Mean = total / time.Duration(len(samples))
	s.CPS = n / total.Seconds()
	slices.Sort(d)
	s.P50, s.P99 = pct(d, 50), pct(d, 99)
	return s
}

// pct is the nearest-rank percentile of sorted d.
func pct(d []time.Duration, p float64) time.Duration {
	return d[max(0, int(math.Ceil(p/100*float64(len(d))))-1)]
}

// Summary is one line in the Eino comparison program's format.
func (s Stats) Summary(impl Impl, phase string, hist int) string {
	return fmt.Sprintf("SUMMARY impl=%s phase=%s hist=%d n=%d cps=%.1f mean_ms=%.4f p50_ms=%.4f p99_ms=%.4f in_B=%.0f out_B=%.0f rt=%.2f cmds=%.2f",
		impl, phase, hist, s.N, s.CPS, ms(s.Mean), ms(s.P50), ms(s.P99), s.Written, s.Read, s.RoundTrips, s.Commands)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Measure runs one cycle on thread and returns what it took and cost.
func (c *Cycler) Measure(ctx context.Context, m *Meter, thread string) (Sample, int, error) {
	before := m.Counts()
	start := time.Now()
	turn, err := c.Cycle(ctx, thread)
	took := time.Since(start)
	after := m.Counts()
	return Sample{Took: took, Counts: Counts{
		RoundTrips: after.RoundTrips - before.RoundTrips,
		Written:    after.Written - before.Written,
		Read:       after.Read - before.Read,
		Commands:   after.Commands - before.Commands,
	}}, turn, err
}

// statusTool stands in for http_request: it answers at once, the same
// every time, and never touches the network.
type statusTool struct{}

// statusSchema is statusTool's schema, the same bytes at every call, as
// http_request's.
var statusSchema = json.RawMessage(`{"type":"object","properties":{"method":{"type":"string"},"url":{"type":"string"}},"required":["method","url"]}`)

func (statusTool) Name() string                    { return ToolName }
func (statusTool) Description() string             { return "Make an HTTP request and return the status and body." }
func (statusTool) Schema() json.RawMessage         { return statusSchema }
func (statusTool) Idempotent(json.RawMessage) bool { return true }
func (statusTool) Call(context.Context, json.RawMessage) (string, error) {
	return "200 OK\n{\"status\":\"healthy\"}", nil
}

// scriptedModel answers like the Eino program's: after a user message it
// asks for one http_request call; after a tool result it answers, quoting
// the user's question.
type scriptedModel struct{}

func (scriptedModel) Name() string { return "scripted" }

func (scriptedModel) Generate(_ context.Context, msgs []llm.Message, _ []llm.ToolDef) (llm.Message, error) {
	last := msgs[len(msgs)-1]
	switch last.Role {
	case llm.RoleUser:
		return llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{
			ID: fmt.Sprintf("call_%d", len(msgs)), Name: ToolName, Arguments: toolArgs,
		}}}, nil
	case llm.RoleTool:
		q := ""
		for i := len(msgs) - 1; i >= 0 && q == ""; i-- {
			if msgs[i].Role == llm.RoleUser {
				q = msgs[i].Content
			}
		}
		return llm.Message{Role: llm.RoleAssistant, Content: fmt.Sprintf("Re %q: the status service is healthy (GET /health -> 200).", q)}, nil
	}
	return llm.Message{}, fmt.Errorf("scripted model: cannot answer a %s message", last.Role)
}
