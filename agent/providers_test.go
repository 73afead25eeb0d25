package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/tools"
)

// Tests of the agent with the real OpenAI and Anthropic clients, against
// the strict local fakes of their APIs.

// schemaTool is a tool with the schema its server wrote.
type schemaTool struct {
	name   string
	schema string

	mu   sync.Mutex
	runs []string
}

func (t *schemaTool) Name() string                    { return t.name }
func (t *schemaTool) Description() string             { return "The " + t.name + " tool." }
func (t *schemaTool) Schema() json.RawMessage         { return json.RawMessage(t.schema) }
func (t *schemaTool) Idempotent(json.RawMessage) bool { return true }
func (t *schemaTool) Call(_ context.Context, args json.RawMessage) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs = append(t.runs, string(args))
	return "ran " + t.name, nil
}

func (t *schemaTool) Runs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.runs)
}

// provider is one of the fakes with a client pointed at it.
type provider struct {
	name   string
	stream bool
	model  llm.Model
	// then scripts the fake's next replies.
	then func(replies ...llm.Message)
	// offered returns the tool names of every request, in order.
	offered func() [][]string
	// statuses returns the HTTP status of every request.
	statuses func() []int
}

// providers returns each fake provider, streaming and not, for model
// (empty: the client's default).
func providers(t *testing.T, model string) []func(t *testing.T) provider {
	return []func(t *testing.T) provider{
		func(t *testing.T) provider { return openAIProvider(t, model, false) },
		func(t *testing.T) provider { return openAIProvider(t, model, true) },
		func(t *testing.T) provider { return anthropicProvider(t, model, false) },
		func(t *testing.T) provider { return anthropicProvider(t, model, true) },
	}
}

func openAIProvider(t *testing.T, model string, stream bool) provider {
	srv := llmtest.NewOpenAIServer(t)
	m, err := llm.NewOpenAI(llm.OpenAIOptions{BaseURL: srv.URL(), Model: model})
	if err != nil {
		t.Fatal(err)
	}
	return provider{
		name: "openai", stream: stream, model: llm.Retry(m, llm.RetryOptions{Sleep: noSleep}),
		then: srv.Then,
		offered: func() [][]string {
			var out [][]string
			for _, r := range srv.Requests() {
				var names []string
				for _, tl := range r.Tools {
					names = append(names, tl.Function.Name)
				}
				out = append(out, names)
			}
			return out
		},
		statuses: func() []int {
			var out []int
			for _, r := range srv.Requests() {
				out = append(out, r.Status)
			}
			return out
		},
	}
}

func anthropicProvider(t *testing.T, model string, stream bool) provider {
	srv := llmtest.NewAnthropicServer(t)
	m, err := llm.NewAnthropic(llm.AnthropicOptions{BaseURL: srv.URL(), Model: model})
	if err != nil {
		t.Fatal(err)
	}
	return provider{
		name: "anthropic", stream: stream, model: llm.Retry(m, llm.RetryOptions{Sleep: noSleep}),
		then: srv.Then,
		offered: func() [][]string {
			var out [][]string
			for _, r := range srv.Requests() {
				var names []string
				for _, tl := range r.Tools {
					names = append(names, tl.Name)
				}
				out = append(out, names)
			}
			return out
		},
		statuses: func() []int {
			var out []int
			for _, r := range srv.Requests() {
				out = append(out, r.Status)
			}
			return out
		},
	}
}

func noSleep(context.Context, time.Duration) error { return nil }

// runAgent runs one conversation to its end with every tool needing no
// approval, streaming when p does, and returns its final state.
func runAgent(t *testing.T, p provider, request string, ts ...tools.Tool) agent.State {
	t.Helper()
	var yaml strings.Builder
	yaml.WriteString("tools:\n")
	for _, tl := range ts {
		fmt.Fprintf(&yaml, "  %s: {approval: never}\n", tl.Name())
	}
	policy, err := tools.ParsePolicy([]byte(yaml.String()))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, ts...)
	if err != nil {
		t.Fatal(err)
	}
	opts := agent.Options{}
	if p.stream {
		opts.OnStream = func(context.Context, *agent.State, agent.Stream) {}
	}
	a, err := agent.New(p.model, reg, graph.NewMemoryStore(graph.MemoryOptions{}), opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Graph().Start(context.Background(), "t", agent.NewState("t", "U_ALICE", "C1", request), graph.RunConfig{})
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if res.Status() != graph.Done {
		t.Fatalf("run is %s (%s), want done; requests answered %v", res.Status(), res.Checkpoint.Error, p.statuses())
	}
	return res.State
}

func (p provider) String() string {
	if p.stream {
		return p.name + " streaming"
	}
	return p.name
}

// An MCP server's tool without properties, one with a top-level oneOf,
// and one whose arguments are not an object at all: the first two are
// offered in a form each provider takes and work; the third is left out;
// every other tool keeps working and the conversation goes on.
func TestToolSchemasFitTheProvider(t *testing.T) {
	for _, mk := range providers(t, "") {
		p := mk(t)
		t.Run(p.String(), func(t *testing.T) {
			bare := &schemaTool{name: "files__list", schema: `{"type":"object"}`}
			either := &schemaTool{name: "files__find", schema: `{"oneOf":[` +
				`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false},` +
				`{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":false}]}`}
			scalar := &schemaTool{name: "files__count", schema: `{"type":"string"}`}
			plain := &schemaTool{name: "lookup", schema: `{"type":"object","properties":{"n":{"type":"integer"}}}`}
			p.then(
				llmtest.Reply("", llm.ToolCall{ID: "c1", Name: "files__list", Arguments: `{}`},
					llm.ToolCall{ID: "c2", Name: "files__find", Arguments: `{"id":7}`},
					llm.ToolCall{ID: "c3", Name: "lookup", Arguments: `{"n":1}`}),
				// Both branches at once: the looser schema allows it,
				// the tool's own does not.
				llmtest.Reply("", llm.ToolCall{ID: "c4", Name: "files__find", Arguments: `{"id":7,"path":"/"}`}),
				llmtest.Reply("All done."),
			)
			s := runAgent(t, p, "list the files", bare, either, scalar, plain)
			if got := s.Answer(); got != "All done." {
				t.Errorf("answer = %q, want %q", got, "All done.")
			}
			if runs := bare.Runs(); len(runs) != 1 {
				t.Errorf("files__list ran %v, want once", runs)
			}
			if runs := either.Runs(); !slices.Equal(runs, []string{`{"id":7}`}) {
				t.Errorf("files__find ran %v, want once with {\"id\":7} (the call matching both branches is refused)", runs)
			}
			if runs := plain.Runs(); len(runs) != 1 {
				t.Errorf("lookup ran %v, want once", runs)
			}
			for i, names := range p.offered() {
				slices.Sort(names)
				if want := []string{"files__find", "files__list", "lookup"}; !slices.Equal(names, want) {
					t.Errorf("request %d offered %v, want %v", i+1, names, want)
				}
			}
			if c, ok := p.model.(llm.ToolChecker); !ok {
				t.Errorf("%T is not a ToolChecker", p.model)
			} else {
				left := c.CheckTools([]llm.ToolDef{{Name: bare.name, Parameters: bare.Schema()}, {Name: scalar.name, Parameters: scalar.Schema()}})
				if len(left) != 1 || left[0].Tool != "files__count" {
					t.Errorf("CheckTools = %+v, want files__count alone", left)
				}
			}
		})
	}
}
