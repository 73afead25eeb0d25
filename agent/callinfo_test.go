package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/tools"
)

// infoTool records the CallInfo of each call, and may end a call with an
// unknown outcome, as an MCP server that dies mid-call does.
type infoTool struct {
	idempotent bool
	cutOff     bool
	mu         sync.Mutex
	infos      []tools.CallInfo
}

func (*infoTool) Name() string                      { return "remote" }
func (*infoTool) Description() string               { return "a remote tool" }
func (*infoTool) Schema() json.RawMessage           { return json.RawMessage(`{"type":"object"}`) }
func (t *infoTool) Idempotent(json.RawMessage) bool { return t.idempotent }
func (t *infoTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	return t.CallWithInfo(ctx, tools.CallInfo{}, args)
}
func (t *infoTool) CallWithInfo(_ context.Context, info tools.CallInfo, _ json.RawMessage) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.infos = append(t.infos, info)
	if t.cutOff {
		return "", fmt.Errorf("the server stopped during the call: %w", tools.ErrOutcomeUnknown)
	}
	return "ok", nil
}

func TestToolsThatNeedTheCall(t *testing.T) {
	tests := []struct {
		name       string
		idempotent bool
		cutOff     bool
		want       agent.CallStatus
	}{
		{"done", false, false, agent.Done},
		{"cut off, not idempotent: a person is asked", false, true, agent.Unknown},
		{"cut off, idempotent: an error result", true, true, agent.Failed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := &infoTool{idempotent: tt.idempotent, cutOff: tt.cutOff}
			policy, err := tools.ParsePolicy([]byte("tools:\n  remote: {approval: never}\n"))
			if err != nil {
				t.Fatal(err)
			}
			reg, err := tools.NewRegistry(policy, tool)
			if err != nil {
				t.Fatal(err)
			}
			model := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{{Name: "remote", Arguments: `{}`}} }}
			a, err := agent.New(model, reg, graph.NewMemoryStore(graph.MemoryOptions{}), agent.Options{})
			if err != nil {
				t.Fatal(err)
			}
			res, err := a.Graph().Start(context.Background(), "T:C:1", agent.NewState("T:C:1", "U1", "C1", "go"), graph.RunConfig{})
			if err != nil {
				t.Fatal(err)
			}
			want := tools.CallInfo{Thread: "T:C:1", Call: "0.0", Attempt: 1, Requester: "U1", Channel: "C1"}
			if len(tool.infos) != 1 || tool.infos[0] != want {
				t.Errorf("the tool was called with %+v, want once with %+v", tool.infos, want)
			}
			var got agent.CallStatus
			if w := res.State.Waiting(); len(w) == 1 {
				got = w[0].Status
			} else if n := len(res.State.Messages); n >= 2 && res.State.Messages[n-2].Role == llm.RoleTool {
				got = agent.Done
				if res.State.Messages[n-2].IsError {
					got = agent.Failed
				}
			}
			if got != tt.want {
				t.Errorf("call ended %s, want %s (status %s)", got, tt.want, res.Status())
			}
		})
	}
}

// dynamicBox is a toolbox some of whose tools come from outside the bot,
// as tools/mcp's Manager is: only fixed ones are in the fingerprint.
type dynamicBox struct {
	*tools.Registry
	fixed []tools.Tool
}

func (b dynamicBox) FixedTools() []tools.Tool { return b.fixed }

func TestOutsideToolsAreNotInTheFingerprint(t *testing.T) {
	ctx := context.Background()
	store := graph.NewMemoryStore(graph.MemoryOptions{})
	remote := &infoTool{}
	newAgent := func(fixed ...tools.Tool) *agent.Agent {
		t.Helper()
		reg, err := tools.NewRegistry(nil, append([]tools.Tool{remote}, fixed...)...)
		if err != nil {
			t.Fatal(err)
		}
		model := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{{Name: "remote", Arguments: `{}`}} }}
		a, err := agent.New(model, dynamicBox{reg, fixed}, store, agent.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	lookup := &agenttest.Tool{ToolName: "lookup"}
	before := newAgent(lookup)
	res, err := before.Graph().Start(ctx, "T:C:1", agent.NewState("T:C:1", "U1", "C1", "go"), graph.RunConfig{})
	if err != nil || len(res.State.Waiting()) != 1 {
		t.Fatalf("Start = %v, %d waiting; want a pause on the remote call", err, len(res.State.Waiting()))
	}
	key := res.State.Waiting()[0].Key
	// A deploy adds a built-in tool: the graph changed, but not in what
	// the paused call depends on, so the thread resumes.
	after := newAgent(lookup, &agenttest.Tool{ToolName: "extra"})
	if _, err := after.Graph().Resume(ctx, "T:C:1", after.Decide(map[string]agent.Decision{key: {Kind: agent.Approve, By: "U2"}})); err != nil {
		t.Fatalf("Resume after the deploy = %v, want the remote call to run", err)
	}
	if len(remote.infos) != 1 {
		t.Errorf("the remote tool ran %d times, want once", len(remote.infos))
	}
}

// A later turn's call runs for the person who wrote that turn: a tool
// that asks for input asks them, not whoever started the thread, and the
// system prompt names them.
func TestCallInfoNamesTheAuthorOfTheTurn(t *testing.T) {
	tool := &infoTool{}
	policy, err := tools.ParsePolicy([]byte("tools:\n  remote: {approval: never}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, tool)
	if err != nil {
		t.Fatal(err)
	}
	model := &promptRecorder{Planner: &agenttest.Planner{Plan: func(string) []llm.ToolCall { return []llm.ToolCall{{Name: "remote", Arguments: `{}`}} }}}
	a, err := agent.New(model, reg, graph.NewMemoryStore(graph.MemoryOptions{}), agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := a.Graph().Start(ctx, "T:C:1", agent.NewState("T:C:1", "U1", "C1", "go"), graph.RunConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Graph().Continue(ctx, "T:C:1", agent.UserTurn("U2", "again")); err != nil {
		t.Fatal(err)
	}
	if len(tool.infos) != 2 || tool.infos[0].Requester != "U1" || tool.infos[1].Requester != "U2" {
		t.Errorf("the tool was called with %+v, want the first call for U1 and the second for U2", tool.infos)
	}
	if last := model.systems[len(model.systems)-1]; !strings.Contains(last, "working for user U2") {
		t.Errorf("the system prompt of U2's turn = %q, want it to name U2", last)
	}
}

// promptRecorder is a Planner that keeps the system prompts it is sent.
type promptRecorder struct {
	*agenttest.Planner
	systems []string
}

func (p *promptRecorder) Generate(ctx context.Context, msgs []llm.Message, defs []llm.ToolDef) (llm.Message, error) {
	p.systems = append(p.systems, msgs[0].Content)
	return p.Planner.Generate(ctx, msgs, defs)
}
