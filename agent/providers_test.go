package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
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
	// thenRaw scripts recorded answers.
	thenRaw func(raws ...llmtest.Raw)
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
		then: srv.Then, thenRaw: srv.ThenRaw,
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
		then: srv.Then, thenRaw: srv.ThenRaw,
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
	res, err := startAgent(t, p, nil, request, ts...)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if res.Status() != graph.Done {
		t.Fatalf("run is %s (%s), want done; requests answered %v", res.Status(), res.Checkpoint.Error, p.statuses())
	}
	return res.State
}

// startAgent starts one conversation with every tool needing no
// approval, streaming to onStream (if set) or when p streams.
func startAgent(t *testing.T, p provider, onStream func(context.Context, *agent.State, agent.Stream), request string, ts ...tools.Tool) (*graph.Result[agent.State], error) {
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
	opts := agent.Options{OnStream: onStream}
	if p.stream && onStream == nil {
		opts.OnStream = func(context.Context, *agent.State, agent.Stream) {}
	}
	a, err := agent.New(p.model, reg, graph.NewMemoryStore(graph.MemoryOptions{}), opts)
	if err != nil {
		t.Fatal(err)
	}
	return a.Graph().Start(context.Background(), "t", agent.NewState("t", "U_ALICE", "C1", request), graph.RunConfig{})
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

// recording is the recorded answer of p's kind for a case: JSON for a
// provider that does not stream, a stream for one that does.
func recording(t *testing.T, p provider, name string) llmtest.Raw {
	ext := ".json"
	if p.stream {
		ext = ".sse"
	}
	return llmtest.Recording(t, name+ext)
}

// A tool call cut off at the length limit never runs and nobody is asked
// about it: the model is told, and the conversation goes on.
func TestCutOffToolCallIsNotRun(t *testing.T) {
	names := map[string]string{"openai": "openai-length-call", "anthropic": "anthropic-max-tokens-call"}
	for _, mk := range providers(t, "") {
		p := mk(t)
		t.Run(p.String(), func(t *testing.T) {
			lookup := &schemaTool{name: "lookup", schema: `{"type":"object","properties":{"n":{"type":"integer"}}}`}
			p.thenRaw(recording(t, p, names[p.name]))
			p.then(llmtest.Reply("I could not finish that call."))
			s := runAgent(t, p, "look it up", lookup)
			if runs := lookup.Runs(); len(runs) != 0 {
				t.Errorf("the cut-off call ran with %v", runs)
			}
			var result string
			for _, m := range s.Messages {
				if m.Role == llm.RoleTool {
					result = m.Content
				}
			}
			if !strings.Contains(result, "length limit") || !strings.Contains(result, "not run") {
				t.Errorf("the model was told %q, want that the call was cut off and not run", result)
			}
			if got := s.Answer(); got != "I could not finish that call." {
				t.Errorf("answer = %q", got)
			}
		})
	}
}

// A tool call the model was writing when it stopped to refuse, or when
// the provider's content filter stopped its reply, never runs either,
// though what arrived of it is a valid object: the reply's text and the
// call's result, what the model answers from, say why it stopped, not
// that it hit the length limit.
func TestStoppedToolCallIsNotRun(t *testing.T) {
	names := map[string]string{"openai": "openai-content-filter-call", "anthropic": "anthropic-refusal-call"}
	for _, mk := range providers(t, "") {
		p := mk(t)
		t.Run(p.String(), func(t *testing.T) {
			note, why := llm.NoteFiltered, "content filter stopped"
			if p.name == "anthropic" {
				note, why = llm.NoteRefused, "model stopped and refused"
			}
			lookup := &schemaTool{name: "lookup", schema: `{"type":"object","properties":{"n":{"type":"integer"}}}`}
			p.thenRaw(recording(t, p, names[p.name]))
			p.then(llmtest.Reply("I could not do that."))
			s := runAgent(t, p, "look it up", lookup)
			if runs := lookup.Runs(); len(runs) != 0 {
				t.Errorf("the stopped call ran with %v", runs)
			}
			if len(s.Messages) < 2 || s.Messages[1].Role != llm.RoleAssistant {
				t.Fatalf("messages = %+v, want the stopped reply second", s.Messages)
			}
			if reply := s.Messages[1].Content; !strings.HasSuffix(reply, note) || strings.Contains(reply, llm.NoteCutOff) {
				t.Errorf("the stopped reply says %q, want it to end with %q", reply, note)
			}
			var result string
			for _, m := range s.Messages {
				if m.Role == llm.RoleTool {
					result = m.Content
				}
			}
			if !strings.Contains(result, why) || !strings.Contains(result, "not run") || strings.Contains(result, "length limit") {
				t.Errorf("the call's result is %q, want that it was not run because the %s", result, why)
			}
			if got := s.Answer(); got != "I could not do that." {
				t.Errorf("answer = %q", got)
			}
		})
	}
}

// An answer cut off, filtered or refused says so in words.
func TestStopReasonsAreSaid(t *testing.T) {
	tests := []struct {
		recording map[string]string // by provider and streaming
		want      string
	}{
		{map[string]string{"openai": "openai-length.json", "anthropic": "anthropic-max-tokens.json"}, llm.NoteCutOff},
		{map[string]string{"openai": "openai-content-filter.json"}, llm.NoteFiltered},
		{map[string]string{"openai": "openai-refusal.json", "openai streaming": "openai-refusal.sse",
			"anthropic": "anthropic-refusal.json", "anthropic streaming": "anthropic-refusal.sse"}, "declined|can't help"},
	}
	for _, tt := range tests {
		for _, mk := range providers(t, "") {
			p := mk(t)
			name, ok := tt.recording[p.String()]
			if !ok {
				continue
			}
			t.Run(name+" "+p.String(), func(t *testing.T) {
				var written []string
				p.thenRaw(llmtest.Recording(t, name))
				res, err := startAgent(t, p, func(_ context.Context, _ *agent.State, st agent.Stream) {
					if st.Phase == agent.Written {
						written = append(written, st.Text)
					}
				}, "tell me")
				if err != nil || res.Status() != graph.Done {
					t.Fatalf("Start() = %v, %v; want done", res, err)
				}
				answer := res.State.Answer()
				if !regexp.MustCompile(regexp.QuoteMeta(tt.want) + "|" + tt.want).MatchString(answer) {
					t.Errorf("answer = %q, want it to say %q", answer, tt.want)
				}
				if len(written) != 1 || written[0] != answer {
					t.Errorf("shown as written %q, want the answer once", written)
				}
			})
		}
	}
}

// A stream that breaks — an error in it, an overload event, or no end —
// is retried: one answer in the conversation, the broken text finished
// with a note before the new answer replaces it.
func TestBrokenStreamIsRetriedThroughTheAgent(t *testing.T) {
	tests := []struct{ provider, recording string }{
		{"openai", "openai-error-midstream.sse"},
		{"openai", "openai-cut.sse"},
		{"anthropic", "anthropic-overloaded.sse"},
		{"anthropic", "anthropic-cut.sse"},
	}
	for _, tt := range tests {
		t.Run(tt.recording, func(t *testing.T) {
			var p provider
			if tt.provider == "openai" {
				p = openAIProvider(t, "", true)
			} else {
				p = anthropicProvider(t, "", true)
			}
			p.thenRaw(llmtest.Recording(t, tt.recording))
			p.then(llmtest.Reply("The whole answer."))
			var shown []string
			res, err := startAgent(t, p, func(_ context.Context, _ *agent.State, st agent.Stream) {
				if st.Phase != agent.Thinking {
					shown = append(shown, st.Text)
				}
			}, "tell me")
			if err != nil || res.Status() != graph.Done {
				t.Fatalf("Start() = %v, %v; want done", res, err)
			}
			var answers []string
			for _, m := range res.State.Messages {
				if m.Role == llm.RoleAssistant {
					answers = append(answers, m.Content)
				}
			}
			if !slices.Equal(answers, []string{"The whole answer."}) {
				t.Errorf("assistant messages %q, want the whole answer once", answers)
			}
			i := slices.IndexFunc(shown, func(s string) bool { return strings.HasSuffix(s, llm.NoteRetrying) })
			if i < 0 || shown[len(shown)-1] != "The whole answer." {
				t.Errorf("shown %q; want the broken text with the retry note, then the answer", shown)
			}
			if got := p.statuses(); !slices.Equal(got, []int{200, 200}) {
				t.Errorf("requests answered %v, want two", got)
			}
		})
	}
}

// An account out of quota is said so, once: no retry.
func TestOutOfQuotaThroughTheAgent(t *testing.T) {
	for _, stream := range []bool{false, true} {
		p := openAIProvider(t, "", stream)
		quota := llmtest.Recording(t, "openai-quota.json")
		quota.Status = 429
		p.thenRaw(quota)
		p.then(llmtest.Reply("never"))
		res, err := startAgent(t, p, nil, "tell me")
		if err == nil && res.Status() != graph.Failed {
			t.Fatalf("stream %v: run is %s, want failed", stream, res.Status())
		}
		msg := fmt.Sprint(err)
		if res != nil && res.Checkpoint != nil {
			msg += res.Checkpoint.Error
		}
		if !strings.Contains(msg, "out of quota") {
			t.Errorf("stream %v: failure %q, want it to say out of quota", stream, msg)
		}
		if got := p.statuses(); len(got) != 1 {
			t.Errorf("stream %v: requests answered %v, want one (no retry)", stream, got)
		}
	}
}

// Streamed calls as OpenAI-compatible servers send them: each call runs
// once, with its arguments.
func TestStreamedCallsAssembled(t *testing.T) {
	tests := []struct {
		recording string
		lookup    []string
		deploy    []string
	}{
		{"vllm-repeated-metadata.sse", []string{`{"n":4}`}, nil},
		{"interleaved-calls.sse", []string{`{"n":1}`}, []string{`{"n":2}`}},
		{"llama-object-arguments.sse", []string{`{"n":3}`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.recording, func(t *testing.T) {
			p := openAIProvider(t, "", true)
			lookup := &schemaTool{name: "lookup", schema: `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`}
			deploy := &schemaTool{name: "deploy", schema: `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`}
			p.thenRaw(llmtest.Recording(t, tt.recording))
			p.then(llmtest.Reply("Done."))
			s := runAgent(t, p, "go", lookup, deploy)
			if got := lookup.Runs(); !slices.Equal(got, tt.lookup) {
				t.Errorf("lookup ran %v, want %v", got, tt.lookup)
			}
			if got := deploy.Runs(); !slices.Equal(got, tt.deploy) {
				t.Errorf("deploy ran %v, want %v", got, tt.deploy)
			}
			if s.Answer() != "Done." {
				t.Errorf("answer = %q", s.Answer())
			}
		})
	}
}

// LLM_MODEL=o4-mini: no temperature is sent (the fake refuses it, as
// OpenAI does), streaming or not.
func TestReasoningModelGetsNoTemperature(t *testing.T) {
	for _, stream := range []bool{false, true} {
		p := openAIProvider(t, "o4-mini", stream)
		p.then(llmtest.Reply("Fine."))
		s := runAgent(t, p, "hi")
		if s.Answer() != "Fine." {
			t.Errorf("stream %v: answer = %q", stream, s.Answer())
		}
	}
}
