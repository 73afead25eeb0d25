package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/tools"
)

const policyYAML = `
tools:
  lookup: {approval: never}
  deploy: {approval: required, expires_after: 1h}
  delete: {approval: required, expires_after: 1h}
`

// fixture is an agent over three recording tools: lookup needs no
// approval, deploy and delete do.
type fixture struct {
	agent                  *agent.Agent
	g                      *graph.Graph[agent.State]
	reg                    *tools.Registry
	lookup, deploy, delete *agenttest.Tool
	now                    time.Time
}

func threeCalls(string) []llm.ToolCall {
	return []llm.ToolCall{
		{Name: "lookup", Arguments: `{"n":1}`},
		{Name: "deploy", Arguments: `{"n":2}`},
		{Name: "delete", Arguments: `{"n":3}`},
	}
}

func newFixture(t testing.TB, store graph.Store, model llm.Model, deployIdempotent bool) *fixture {
	t.Helper()
	f := &fixture{
		lookup: &agenttest.Tool{ToolName: "lookup"},
		deploy: &agenttest.Tool{ToolName: "deploy", NotIdempotent: !deployIdempotent},
		delete: &agenttest.Tool{ToolName: "delete"},
		now:    time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
	}
	policy, err := tools.ParsePolicy([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, f.lookup, f.deploy, f.delete)
	if err != nil {
		t.Fatal(err)
	}
	f.reg = reg
	if model == nil {
		model = &agenttest.Planner{Plan: threeCalls}
	}
	f.agent, err = agent.New(model, reg, store, agent.Options{Graph: graph.Options{Now: func() time.Time { return f.now }}})
	if err != nil {
		t.Fatal(err)
	}
	f.g = f.agent.Graph()
	return f
}

// decisions the tests make: approve deploy, reject delete.
var script = map[string]agent.Decision{
	"deploy": {Kind: agent.Approve, By: "U_BOB"},
	"delete": {Kind: agent.Reject, By: "U_BOB", Reason: "too risky"},
}

// drive runs a thread to the end, answering each waiting call from script
// one call at a time, recovering runs cut off mid-way.
func drive(ctx context.Context, t *testing.T, f *fixture, thread string) *graph.Result[agent.State] {
	t.Helper()
	for range 50 {
		res, err := f.g.State(ctx, thread)
		if err != nil {
			t.Fatalf("State(%s) = %v", thread, err)
		}
		switch res.Status() {
		case graph.Done:
			return res
		case graph.Running:
			_, err = f.g.Recover(ctx, thread)
		case graph.Paused:
			c := res.State.Waiting()[0]
			d := script[c.Tool]
			if c.Status == agent.Unknown {
				d = agent.Decision{Kind: agent.Approve, By: "U_BOB"} // retry
			}
			_, err = f.g.Resume(ctx, thread, f.agent.Decide(map[string]agent.Decision{c.Key: d}))
		default:
			t.Fatalf("thread %s is %s: %s", thread, res.Status(), res.Checkpoint.Error)
		}
		if err != nil {
			t.Fatalf("driving %s: %v", thread, err)
		}
	}
	t.Fatalf("thread %s did not finish", thread)
	return nil
}

func transcript(t *testing.T, s agent.State) string {
	t.Helper()
	b, err := json.MarshalIndent(s.Messages, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestThreeParallelCalls(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func() graph.Store) {
		ctx := context.Background()
		f := newFixture(t, newStore(), nil, true)
		res, err := f.g.Start(ctx, "t", agent.NewState("t", "U_ALICE", "C1", "ship it"), graph.RunConfig{})
		if err != nil {
			t.Fatalf("Start() = %v", err)
		}
		// lookup needs no approval and has run; deploy and delete wait.
		if res.Status() != graph.Paused {
			t.Fatalf("Start() status = %s, want paused", res.Status())
		}
		var payload []agent.Call
		if err := json.Unmarshal(res.Interrupts()[0].Payload, &payload); err != nil {
			t.Fatal(err)
		}
		var waiting []string
		for _, c := range payload {
			waiting = append(waiting, c.Tool+":"+c.Status.String())
		}
		if want := []string{"deploy:pending", "delete:pending"}; !slices.Equal(waiting, want) {
			t.Errorf("interrupt payload = %v, want %v", waiting, want)
		}
		if got := res.Interrupts()[0].Deadline; !got.Equal(f.now.Add(time.Hour)) {
			t.Errorf("interrupt deadline = %v, want the calls' expiry %v", got, f.now.Add(time.Hour))
		}
		if len(f.lookup.Runs()) != 1 || len(f.deploy.Runs()) != 0 {
			t.Errorf("before decisions: lookup ran %d, deploy %d; want 1, 0", len(f.lookup.Runs()), len(f.deploy.Runs()))
		}

		final := drive(ctx, t, f, "t")
		if got, want := final.State.Answer(), "Done. lookup → ran lookup {\"n\":1} | deploy → ran deploy {\"n\":2} | delete → Rejected by user U_BOB: too risky"; got != want {
			t.Errorf("answer = %q\nwant     %q", got, want)
		}
		if len(f.lookup.Runs()) != 1 || len(f.deploy.Runs()) != 1 || len(f.delete.Runs()) != 0 {
			t.Errorf("runs: lookup %d deploy %d delete %d, want 1 1 0", len(f.lookup.Runs()), len(f.deploy.Runs()), len(f.delete.Runs()))
		}
	})
}

// TestResumeFromEveryCheckpoint forks every checkpoint of a finished run
// and drives the fork to the end: the transcript must be the same, and
// the fork must execute exactly the approved calls the checkpoint had not
// finished — no call twice, none forgotten.
func TestResumeFromEveryCheckpoint(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func() graph.Store) {
		ctx := context.Background()
		f := newFixture(t, newStore(), nil, true)
		if _, err := f.g.Start(ctx, "t", agent.NewState("t", "U_ALICE", "C1", "ship it"), graph.RunConfig{}); err != nil {
			t.Fatal(err)
		}
		want := transcript(t, drive(ctx, t, f, "t").State)
		hist, err := f.g.History(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) < 7 { // saves that follow each other with no side effect between are merged
			t.Fatalf("History() has %d checkpoints; the run should have written more", len(hist))
		}
		for i, cp := range hist {
			fork := fmt.Sprintf("fork-%d", i)
			if _, err := f.g.Fork(ctx, "t", cp.ID, fork); err != nil {
				t.Fatalf("Fork(%s) = %v", cp.ID, err)
			}
			at, err := f.g.State(ctx, fork)
			if err != nil {
				t.Fatal(err)
			}
			owed := owedRuns(at.State)
			before := len(f.lookup.Runs()) + len(f.deploy.Runs()) + len(f.delete.Runs())
			lookupBefore, deployBefore := len(f.lookup.Runs()), len(f.deploy.Runs())

			got := transcript(t, drive(ctx, t, f, fork).State)
			if got != want {
				t.Errorf("fork of checkpoint %d (step %d, %s) transcript:\n%s\nwant:\n%s", i, cp.Step, cp.Status, got, want)
			}
			ran := map[string]int{
				"lookup": len(f.lookup.Runs()) - lookupBefore,
				"deploy": len(f.deploy.Runs()) - deployBefore,
			}
			if ran["lookup"] != owed["lookup"] || ran["deploy"] != owed["deploy"] {
				t.Errorf("fork of checkpoint %d (step %d, %s): ran %v, want %v", i, cp.Step, cp.Status, ran, owed)
			}
			if after := len(f.lookup.Runs()) + len(f.deploy.Runs()) + len(f.delete.Runs()); after-before != ran["lookup"]+ran["deploy"] {
				t.Errorf("fork of checkpoint %d ran delete, which was rejected", i)
			}
		}
	})
}

// owedRuns says which approved calls a checkpoint's state has not
// finished: those a correct resume must still run, once.
func owedRuns(s agent.State) map[string]int {
	owed := map[string]int{"lookup": 1, "deploy": 1}
	for _, m := range s.Messages {
		if m.Role == llm.RoleTool {
			delete(owed, m.Name)
		}
	}
	for _, c := range s.Calls {
		if c.Status == agent.Done || c.Status == agent.Failed {
			delete(owed, c.Tool)
		}
	}
	for _, tool := range []string{"lookup", "deploy"} {
		if _, ok := owed[tool]; !ok {
			owed[tool] = 0
		}
	}
	return owed
}

func TestModelMistakesBecomeErrorResults(t *testing.T) {
	tests := []struct {
		name string
		call llm.ToolCall
		want string
	}{
		{"unknown tool", llm.ToolCall{ID: "x", Name: "rm_rf", Arguments: `{}`}, `Error: there is no tool named "rm_rf". Available tools: delete, deploy, lookup.`},
		{"broken JSON", llm.ToolCall{ID: "x", Name: "lookup", Arguments: `{"n":`}, "Error: the arguments are not valid JSON"},
		{"schema violation", llm.ToolCall{ID: "x", Name: "lookup", Arguments: `{"n":"one"}`}, "Error: invalid arguments:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			model := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{tt.call} }}
			f := newFixture(t, graph.NewMemoryStore(graph.MemoryOptions{}), model, true)
			res, err := f.g.Start(ctx, "t", agent.NewState("t", "U1", "C1", "go"), graph.RunConfig{})
			if err != nil {
				t.Fatalf("Start() = %v", err)
			}
			if res.Status() != graph.Done {
				t.Fatalf("Start() status = %s (%s), want done", res.Status(), res.Checkpoint.Error)
			}
			msgs := res.State.Messages
			toolMsg := msgs[len(msgs)-2]
			if toolMsg.Role != llm.RoleTool || !toolMsg.IsError || !strings.HasPrefix(toolMsg.Content, tt.want) {
				t.Errorf("tool result = %+v, want an error starting %q", toolMsg, tt.want)
			}
			if !strings.Contains(res.State.Answer(), "Error:") {
				t.Errorf("model's answer %q does not show it saw the error", res.State.Answer())
			}
		})
	}
}

func TestEditRunsTheEditedArguments(t *testing.T) {
	ctx := context.Background()
	model := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{{Name: "deploy", Arguments: `{"n":1}`}} }}
	f := newFixture(t, graph.NewMemoryStore(graph.MemoryOptions{}), model, true)
	res, err := f.g.Start(ctx, "t", agent.NewState("t", "U1", "C1", "go"), graph.RunConfig{})
	if err != nil {
		t.Fatal(err)
	}
	key := res.State.Waiting()[0].Key

	bad := map[string]agent.Decision{key: {Kind: agent.Edit, By: "U2", Args: json.RawMessage(`{"n":"x"}`)}}
	if _, err := f.g.Resume(ctx, "t", f.agent.Decide(bad)); err == nil {
		t.Fatal("Resume(edit with args against the schema) = nil, want an error")
	}
	good := map[string]agent.Decision{key: {Kind: agent.Edit, By: "U2", Args: json.RawMessage(`{"n":42}`)}}
	res, err = f.g.Resume(ctx, "t", f.agent.Decide(good))
	if err != nil {
		t.Fatalf("Resume(edit) = %v", err)
	}
	if runs := f.deploy.Runs(); !slices.Equal(runs, []string{`{"n":42}`}) {
		t.Errorf("deploy ran with %v, want the edited [{\"n\":42}]", runs)
	}
	if !strings.Contains(res.State.Answer(), "user U2 edited the arguments") {
		t.Errorf("answer %q: the model was not told of the edit", res.State.Answer())
	}
}

// A call that needs two approvals: an edit does not run it but makes it
// wait again, in a new revision, with the edited arguments; it runs with
// them once approved, and the model hears who edited and who approved.
func TestEditOfACallNeedingSeveralApprovalsWaitsAgain(t *testing.T) {
	ctx := context.Background()
	deploy := &agenttest.Tool{ToolName: "deploy"}
	policy, err := tools.ParsePolicy([]byte("tools:\n  deploy: {approvals_required: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, deploy)
	if err != nil {
		t.Fatal(err)
	}
	model := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{{Name: "deploy", Arguments: `{"n":1}`}} }}
	a, err := agent.New(model, reg, graph.NewMemoryStore(graph.MemoryOptions{}), agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := a.Graph()
	res, err := g.Start(ctx, "t", agent.NewState("t", "U1", "C1", "go"), graph.RunConfig{})
	if err != nil {
		t.Fatal(err)
	}
	c := res.State.Waiting()[0]
	if c.Quorum() != 2 || c.Revision != 0 {
		t.Fatalf("new call: quorum %d, revision %d; want 2, 0", c.Quorum(), c.Revision)
	}
	edit := agent.Decision{Kind: agent.Edit, By: "U2", Args: json.RawMessage(`{"n":42}`)}
	res, err = g.Resume(ctx, "t", a.Decide(map[string]agent.Decision{c.Key: edit}))
	if err != nil {
		t.Fatalf("Resume(edit) = %v", err)
	}
	c = res.State.Waiting()[0]
	if res.Status() != graph.Paused || c.Status != agent.Pending || c.Revision != 1 || c.EditedBy != "U2" || string(c.RunArgs()) != `{"n":42}` || c.Decision != nil {
		t.Fatalf("after the edit: %s, call %+v; want it pending in revision 1 with the edited arguments", res.Status(), c)
	}
	if len(deploy.Runs()) != 0 {
		t.Fatalf("deploy ran after an edit alone: %v", deploy.Runs())
	}
	approve := agent.Decision{Kind: agent.Approve, By: "U3", Hash: c.RunHash(),
		Approvals: []agent.Approval{{By: "U2"}, {By: "U3"}}}
	res, err = g.Resume(ctx, "t", a.Decide(map[string]agent.Decision{c.Key: approve}))
	if err != nil {
		t.Fatalf("Resume(approve) = %v", err)
	}
	if runs := deploy.Runs(); !slices.Equal(runs, []string{`{"n":42}`}) {
		t.Errorf("deploy ran with %v, want the edited [{\"n\":42}]", runs)
	}
	if !strings.Contains(res.State.Answer(), "user U2 edited the arguments, and user U2 and user U3 approved them") {
		t.Errorf("answer %q: the model was not told of the edit and the approvals", res.State.Answer())
	}
}

func TestDecisionsOnSettledOrUnknownCallsChangeNothing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, graph.NewMemoryStore(graph.MemoryOptions{}), nil, true)
	res, err := f.g.Start(ctx, "t", agent.NewState("t", "U1", "C1", "go"), graph.RunConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var deployKey, lookupKey string
	for _, c := range res.State.Calls {
		switch c.Tool {
		case "deploy":
			deployKey = c.Key
		case "lookup":
			lookupKey = c.Key
		}
	}
	approve := agent.Decision{Kind: agent.Approve, By: "U2"}
	if _, err := f.g.Resume(ctx, "t", f.agent.Decide(map[string]agent.Decision{deployKey: approve})); err != nil {
		t.Fatal(err)
	}
	hist, _ := f.g.History(ctx, "t")
	tests := []struct {
		name string
		key  string
		d    agent.Decision
		want func(error) bool
	}{
		{"second approve", deployKey, approve, func(err error) bool {
			var de *agent.DecidedError
			return errors.As(err, &de) && de.By == "U2" && de.Status == agent.Done
		}},
		{"call that needed no approval", lookupKey, approve, func(err error) bool {
			var de *agent.DecidedError
			return errors.As(err, &de)
		}},
		{"unknown call", "9.9", approve, func(err error) bool { return errors.Is(err, agent.ErrUnknownCall) }},
		{"no decider", deployKey, agent.Decision{Kind: agent.Approve}, func(err error) bool { return err != nil }},
	}
	for _, tt := range tests {
		// DecideOne, a click's, refuses what Decide refuses.
		for how, mod := range map[string]graph.StateModifier[agent.State]{
			"Decide": f.agent.Decide(map[string]agent.Decision{tt.key: tt.d}), "DecideOne": f.agent.DecideOne(tt.key, tt.d),
		} {
			if _, err := f.g.Resume(ctx, "t", mod); !tt.want(err) {
				t.Errorf("Resume(%s, by %s) = %v", tt.name, how, err)
			}
		}
	}
	if after, _ := f.g.History(ctx, "t"); len(after) != len(hist) {
		t.Errorf("refused decisions wrote %d checkpoints", len(after)-len(hist))
	}
	if n := len(f.deploy.Runs()); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

func TestRespondAndExpire(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, graph.NewMemoryStore(graph.MemoryOptions{}), nil, true)
	if _, err := f.g.Start(ctx, "t", agent.NewState("t", "U1", "C1", "go"), graph.RunConfig{}); err != nil {
		t.Fatal(err)
	}
	res, err := f.g.State(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var deployKey, deleteKey string
	for _, c := range res.State.Waiting() {
		if c.Tool == "deploy" {
			deployKey = c.Key
		} else {
			deleteKey = c.Key
		}
	}
	if _, err := f.g.Resume(ctx, "t", f.agent.Decide(map[string]agent.Decision{deployKey: {Kind: agent.Expire}})); err != nil {
		t.Fatalf("Resume(expire) = %v", err)
	}
	// A reply in the thread answers the waiting call as a rejection with
	// its text as the reason (the runner decides it as Respond).
	res, err = f.g.Resume(ctx, "t", f.agent.Decide(map[string]agent.Decision{deleteKey: {Kind: agent.Respond, By: "U3", Reason: "use staging instead"}}))
	if err != nil {
		t.Fatalf("Resume(respond) = %v", err)
	}
	answer := res.State.Answer()
	for _, want := range []string{"deploy → The request for approval expired", "delete → Rejected by user U3: use staging instead"} {
		if !strings.Contains(answer, want) {
			t.Errorf("answer %q does not contain %q", answer, want)
		}
	}
	if len(f.deploy.Runs())+len(f.delete.Runs()) != 0 {
		t.Errorf("expired or rejected calls ran")
	}
	if _, err := f.g.Resume(ctx, "t", f.agent.Decide(map[string]agent.Decision{deleteKey: {Kind: agent.Respond, By: "U3", Reason: "x"}})); !errors.Is(err, graph.ErrNotPaused) {
		t.Errorf("Resume(respond on a finished run) = %v, want ErrNotPaused", err)
	}
}

// A non-idempotent call found running after a crash is not re-run: it
// waits for a person, who can retry it, mark it done or skip it.
func TestCallCutOffByACrash(t *testing.T) {
	tests := []struct {
		name      string
		d         agent.Decision
		wantRuns  int
		wantInRes string
	}{
		{"retry", agent.Decision{Kind: agent.Approve, By: "U2"}, 1, "ran deploy"},
		{"mark done", agent.Decision{Kind: agent.MarkDone, By: "U2"}, 0, "marked it as done"},
		{"skip", agent.Decision{Kind: agent.Reject, By: "U2"}, 0, "Skipped by user U2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			model := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{{Name: "deploy", Arguments: `{}`}} }}
			store := &crashingStore{Store: graph.NewMemoryStore(graph.MemoryOptions{})}
			f := newFixture(t, store, model, false)
			res, err := f.g.Start(ctx, "t", agent.NewState("t", "U1", "C1", "go"), graph.RunConfig{})
			if err != nil {
				t.Fatal(err)
			}
			key := res.State.Waiting()[0].Key
			// The process "dies" right after saving the call as running.
			store.crashAfterRunning = true
			_, err = f.g.Resume(ctx, "t", f.agent.Decide(map[string]agent.Decision{key: {Kind: agent.Approve, By: "U2"}}))
			if !errors.Is(err, errCrash) {
				t.Fatalf("Resume() = %v, want the simulated crash", err)
			}
			store.crashAfterRunning = false
			res, err = f.g.Recover(ctx, "t")
			if err != nil {
				t.Fatalf("Recover() = %v", err)
			}
			waiting := res.State.Waiting()
			if res.Status() != graph.Paused || len(waiting) != 1 || waiting[0].Status != agent.Unknown {
				t.Fatalf("Recover() = %s %+v, want paused on one unknown call", res.Status(), waiting)
			}
			res, err = f.g.Resume(ctx, "t", f.agent.Decide(map[string]agent.Decision{key: tt.d}))
			if err != nil {
				t.Fatalf("Resume(%s) = %v", tt.name, err)
			}
			if n := len(f.deploy.Runs()); n != tt.wantRuns || !strings.Contains(res.State.Answer(), tt.wantInRes) {
				t.Errorf("after %s: deploy ran %d times, answer %q; want %d and %q", tt.name, n, res.State.Answer(), tt.wantRuns, tt.wantInRes)
			}
		})
	}
}

var errCrash = errors.New("simulated crash")

// crashingStore fails every save after the one that records a call as
// running, as if the process had died there.
type crashingStore struct {
	graph.Store
	crashAfterRunning bool
	crashed           bool
}

func (s *crashingStore) Save(ctx context.Context, cp *graph.Checkpoint) error {
	if s.crashed {
		return errCrash
	}
	if err := s.Store.Save(ctx, cp); err != nil {
		return err
	}
	if s.crashAfterRunning && strings.Contains(string(cp.State), `"status":"running"`) {
		s.crashed = true
		return errCrash
	}
	return nil
}

func (s *crashingStore) Load(ctx context.Context, thread string) (*graph.Checkpoint, error) {
	if s.crashed && !s.crashAfterRunning {
		s.crashed = false
	}
	return s.Store.Load(ctx, thread)
}

// Only a checked claim — an edit whose hash is that of its arguments —
// is applied without checking its arguments again. An edit that claims a
// hash of other arguments, or none, is checked: arguments against the
// schema are refused however they are presented, and unchecked ones are
// canonicalised before they run.
func TestOnlyACheckedEditIsTrusted(t *testing.T) {
	ctx := context.Background()
	model := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{{Name: "deploy", Arguments: `{"n":1}`}} }}
	f := newFixture(t, graph.NewMemoryStore(graph.MemoryOptions{}), model, true)
	res, err := f.g.Start(ctx, "t", agent.NewState("t", "U1", "C1", "go"), graph.RunConfig{})
	if err != nil {
		t.Fatal(err)
	}
	key := res.State.Waiting()[0].Key
	invalid := json.RawMessage(`{"n":"x"}`)
	tests := []struct {
		name string
		d    agent.Decision
	}{
		{"no hash", agent.Decision{Kind: agent.Edit, By: "U2", Args: invalid}},
		{"the hash of valid arguments", agent.Decision{Kind: agent.Edit, By: "U2", Args: invalid,
			Hash: tools.ArgsHash("deploy", json.RawMessage(`{"n":2}`))}},
		{"the hash of another tool", agent.Decision{Kind: agent.Edit, By: "U2", Args: invalid, Hash: tools.ArgsHash("other", invalid)}},
	}
	for _, tt := range tests {
		if _, err := f.g.Resume(ctx, "t", f.agent.Decide(map[string]agent.Decision{key: tt.d})); err == nil {
			t.Errorf("Resume(invalid edit with %s) = nil, want an error", tt.name)
		}
	}
	if runs := f.deploy.Runs(); len(runs) != 0 {
		t.Fatalf("deploy ran with %v, want not at all", runs)
	}
	unchecked := agent.Decision{Kind: agent.Edit, By: "U2", Args: json.RawMessage(` { "n" : 42 } `)}
	if _, err := f.g.Resume(ctx, "t", f.agent.Decide(map[string]agent.Decision{key: unchecked})); err != nil {
		t.Fatalf("Resume(edit) = %v", err)
	}
	if runs := f.deploy.Runs(); !slices.Equal(runs, []string{`{"n":42}`}) {
		t.Errorf("deploy ran with %v, want the canonical edited [{\"n\":42}]", runs)
	}
}
