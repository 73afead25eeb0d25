package runner_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/internal/testtarget"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// The tests' world: three tools, all real http_request tools calling a
// local server that counts requests per path. lookup (GET) needs no
// approval; deploy and delete (POST, not idempotent) do.
const policyYAML = `
tools:
  lookup: {approval: never}
  deploy: {approval: required}
  delete: {approval: required}
`

// named gives a tool another name, so that one kind of tool can stand
// under several policies.
type named struct {
	tools.Tool
	name string
}

func (n named) Name() string { return n.name }

// plan is the model's plan for any request: the three calls.
func plan(base string) func(string) []llm.ToolCall {
	return func(text string) []llm.ToolCall {
		if strings.HasPrefix(text, "chat:") {
			return nil
		}
		return []llm.ToolCall{
			{Name: "lookup", Arguments: fmt.Sprintf(`{"method":"GET","url":%q}`, base+"/lookup")},
			{Name: "deploy", Arguments: fmt.Sprintf(`{"method":"POST","url":%q,"body":"v2"}`, base+"/deploy")},
			{Name: "delete", Arguments: fmt.Sprintf(`{"method":"POST","url":%q}`, base+"/delete")},
		}
	}
}

// script is how people decide the calls: approve deploy, reject delete. A
// call whose outcome is unknown after a crash is retried, or marked done
// if onUnknown says so.
func script(thread string, c agent.Call, user string, onUnknown agent.Kind) runner.Decision {
	d := decision(thread, c, agent.Approve, user)
	switch {
	case c.Status == agent.Unknown:
		d.Kind = onUnknown
	case c.Tool == "delete":
		d.Kind, d.Reason = agent.Reject, "not today"
	}
	return d
}

// decision is a decision of kind on c by user, as a card of c would send
// it.
func decision(thread string, c agent.Call, kind agent.Kind, user string) runner.Decision {
	return runner.Decision{Thread: thread, Call: c.Key, Round: c.Attempts, Hash: c.RunHash(), By: user, Kind: kind}
}

// target is the HTTP server the tools call; it counts executions.
type target = testtarget.Server

func newTarget(t *testing.T) *target { return testtarget.New(t) }

// world holds what every service instance of a test shares.
type world struct {
	rdb    redis.UniversalClient
	prefix string
	base   string // the target's URL
	model  llm.Model
	// afterSave, if set, is called after every checkpoint save, with
	// the checkpoint.
	afterSave func(*graph.Checkpoint)
	// policy, if set, replaces policyYAML: another policy, or another
	// version of the bot.
	policy string
	// loads, if set, counts checkpoint loads.
	loads *atomic.Int64
	// auditor, if set, wraps the store for its audit trail.
	auditor func(*redisstore.Store) runner.Store
	// schedule, if set, keeps the wake-up schedule in the store;
	// groups, if set, answers for user groups.
	schedule bool
	groups   runner.Groups
	// inbox: the store keeps the inbox index; members answers for
	// channel membership.
	inbox   bool
	members runner.Members
	// busyWait, if set, is the service's BusyWait.
	busyWait time.Duration
	// beforeCall, if set, is called before the service's BeforeCall;
	// leases, if set, wraps the store as the service's Store;
	// checkpoints, if set, wraps the agent's checkpoint store.
	beforeCall  func(ctx context.Context, c agent.Call)
	leases      func(*redisstore.Store) runner.Store
	checkpoints func(graph.Store) graph.Store
	// deployChecks, if set, counts the checks of deploy's arguments
	// beyond its schema (tools.Checker), and keeps the arguments checked.
	deployChecks *checkCounter
	// log, if set, is the service's logger.
	log logrus.FieldLogger
	// stream: the front end shows answers as the model writes them.
	stream bool
}

// checkCounter counts a tool's checks of arguments (tools.Checker).
type checkCounter struct {
	mu   sync.Mutex
	args []string
}

func (c *checkCounter) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.args...)
}

// checkedTool is a tool whose arguments' checks are counted.
type checkedTool struct {
	tools.Tool
	n *checkCounter
}

func (c checkedTool) Check(args json.RawMessage) error {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.n.args = append(c.n.args, string(args))
	return nil
}

// unauditedSaves is a checkpoint store that appends no audit entries
// with its saves, as on a Redis Cluster: a call's execution goes through
// the service's store (a test's auditor) on its own.
type unauditedSaves struct{ graph.Store }

func (u unauditedSaves) Save(ctx context.Context, cp *graph.Checkpoint) error {
	return u.Store.Save(runner.WithSaveAudit(ctx, nil), cp)
}

// countingStore counts loads.
type countingStore struct {
	graph.Store
	loads *atomic.Int64
}

func (c countingStore) Load(ctx context.Context, thread string) (*graph.Checkpoint, error) {
	c.loads.Add(1)
	return c.Store.Load(ctx, thread)
}

// hookedStore calls a function after every successful save.
type hookedStore struct {
	graph.Store
	after func(*graph.Checkpoint)
}

func (h hookedStore) Save(ctx context.Context, cp *graph.Checkpoint) error {
	if err := h.Store.Save(ctx, cp); err != nil {
		return err
	}
	h.after(cp)
	return nil
}

// service builds one service instance — as one replica would.
func (w world) service(t testing.TB, rep runner.Reporter, leaseTTL time.Duration) (*runner.Service, *redisstore.Store) {
	t.Helper()
	return w.build(t, rep, leaseTTL, time.Now)
}

// serviceAt builds a service whose clock says now.
func (w world) serviceAt(t testing.TB, rep runner.Reporter, now time.Time) (*runner.Service, *redisstore.Store) {
	t.Helper()
	return w.build(t, rep, time.Second, func() time.Time { return now })
}

func (w world) build(t testing.TB, rep runner.Reporter, leaseTTL time.Duration, now func() time.Time) (*runner.Service, *redisstore.Store) {
	t.Helper()
	text := policyYAML
	if w.policy != "" {
		text = w.policy
	}
	policy, err := tools.ParsePolicy([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	http := tools.NewHTTPRequest(tools.HTTPOptions{})
	var deploy tools.Tool = named{http, "deploy"}
	if w.deployChecks != nil {
		deploy = checkedTool{deploy, w.deployChecks}
	}
	reg, err := tools.NewRegistry(policy, named{http, "lookup"}, deploy, named{http, "delete"})
	if err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(w.rdb, redisstore.Options{Prefix: w.prefix})
	model := w.model
	if model == nil {
		model = &agenttest.Planner{Plan: plan(w.base)}
	}
	if rep == nil {
		rep = &recorder{}
	}
	var checkpoints graph.Store = store
	if w.afterSave != nil {
		checkpoints = hookedStore{store, w.afterSave}
	}
	if w.loads != nil {
		checkpoints = countingStore{checkpoints, w.loads}
	}
	if w.checkpoints != nil {
		checkpoints = w.checkpoints(checkpoints)
	}
	if w.auditor != nil {
		checkpoints = unauditedSaves{checkpoints}
	}
	a, err := agent.New(model, reg, checkpoints, agent.Options{Graph: graph.Options{Now: now}})
	if err != nil {
		t.Fatal(err)
	}
	opts := runner.Options{LeaseTTL: leaseTTL, Now: now, Audit: true, Schedule: w.schedule, Inbox: w.inbox,
		Groups: w.groups, Members: w.members, BusyWait: w.busyWait, Logger: w.log, Stream: w.stream}
	var leases runner.Store = store
	if w.leases != nil {
		leases = w.leases(store)
	}
	if w.auditor != nil {
		leases = w.auditor(store)
	}
	svc := runner.New(a, leases, rep, opts)
	if w.beforeCall != nil {
		a.RunBy(beforeCall{svc, w.beforeCall}, false)
	}
	return svc, store
}

// beforeCall is a service whose BeforeCall calls a test's function first.
type beforeCall struct {
	*runner.Service
	first func(ctx context.Context, c agent.Call)
}

func (b beforeCall) BeforeCall(ctx context.Context, s *agent.State, c agent.Call) error {
	b.first(ctx, c)
	return b.Service.BeforeCall(ctx, s, c)
}

// finish drives a thread to the end as people following script would,
// from any state: it decides waiting calls, waits out a dead process's
// lease, and recovers cut-off runs.
func finish(ctx context.Context, svc *runner.Service, thread, user string, onUnknown agent.Kind, deadline time.Duration) (*graph.Result[agent.State], error) {
	stop := time.Now().Add(deadline)
	for time.Now().Before(stop) {
		res, err := svc.State(ctx, thread)
		if err != nil {
			return nil, err
		}
		switch res.Status() {
		case graph.Done:
			return res, nil
		case graph.Failed:
			return nil, fmt.Errorf("run failed: %s", res.Checkpoint.Error)
		case graph.Paused:
			for _, c := range res.State.Waiting() {
				err := svc.Decide(ctx, script(thread, c, user, onUnknown))
				var lost *runner.AlreadyDecidedError
				if err != nil && !errors.As(err, &lost) {
					return nil, err
				}
			}
		}
		if err := svc.Drive(ctx, thread); err != nil {
			return nil, err
		}
		time.Sleep(20 * time.Millisecond) // a dead process's lease may still be held
	}
	return nil, errors.New("the run did not finish in time")
}

// recorder is a Reporter that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []runner.Event
}

func (r *recorder) Report(_ context.Context, e runner.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return nil
}

// kinds lists the events as "kind tool" strings.
func (r *recorder) kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		s := e.Kind.String()
		if e.Call != nil {
			s += " " + e.Call.Tool
		}
		out = append(out, s)
	}
	return out
}

func (r *recorder) answers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e.Kind == runner.Answer {
			out = append(out, e.Text)
		}
	}
	return out
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// waitingCall returns the thread's call to tool that waits for a person.
func waitingCall(t *testing.T, svc *runner.Service, thread, tool string) agent.Call {
	t.Helper()
	res, err := svc.State(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.State.Waiting() {
		if c.Tool == tool {
			return c
		}
	}
	t.Fatalf("no %s call waits in %s", tool, thread)
	return agent.Call{}
}
