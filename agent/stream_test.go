package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// wordModel streams a fixed answer word by word. Its first call can be
// made to stop after some words: fail returns an error, panic panics, and
// kill first calls kill (the process dies there: nothing it does after
// reaches the store).
type wordModel struct {
	answer string
	stopAt int
	how    string // "fail", "panic" or "kill"
	kill   func()

	mu    sync.Mutex
	calls int
}

func (m *wordModel) Name() string { return "words" }

func (m *wordModel) Generate(ctx context.Context, msgs []llm.Message, tools []llm.ToolDef) (llm.Message, error) {
	return m.GenerateStream(ctx, msgs, tools, func(context.Context, string) error { return nil })
}

func (m *wordModel) GenerateStream(ctx context.Context, _ []llm.Message, _ []llm.ToolDef, fn llm.TextFunc) (llm.Message, error) {
	m.mu.Lock()
	m.calls++
	first := m.calls == 1
	m.mu.Unlock()
	words := strings.SplitAfter(m.answer, " ")
	for i := range words {
		if first && m.stopAt > 0 && i == m.stopAt {
			switch m.how {
			case "panic":
				panic("the model client crashed")
			case "kill":
				m.kill()
			}
			return llm.Message{}, errors.New("connection reset mid-stream")
		}
		if err := fn(ctx, strings.Join(words[:i+1], "")); err != nil {
			return llm.Message{}, err
		}
	}
	return llmtest.Reply(m.answer), nil
}

// dyingStore is a store whose process can die: after kill, its saves
// never arrive.
type dyingStore struct {
	graph.Store
	mu   sync.Mutex
	dead bool
}

func (s *dyingStore) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead = true
}

func (s *dyingStore) Save(ctx context.Context, cp *graph.Checkpoint) error {
	s.mu.Lock()
	dead := s.dead
	s.mu.Unlock()
	if dead {
		return errors.New("the process is gone")
	}
	return s.Store.Save(ctx, cp)
}

// streams records what OnStream is told.
type streams struct {
	mu     sync.Mutex
	events []string
}

func (r *streams) on(_ context.Context, _ *agent.State, st agent.Stream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s@%d:%q calls=%v", st.Phase, st.Message, st.Text, st.Calls))
}

func (r *streams) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func newStreamingAgent(t *testing.T, model llm.Model, store graph.Store, rec *streams) *agent.Agent {
	t.Helper()
	f := newFixture(t, store, model, true)
	a, err := agent.New(model, f.reg, store, agent.Options{OnStream: rec.on})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestStreamedAnswerIsSavedWhole: the answer is shown as it grows and
// saved once, complete.
func TestStreamedAnswerIsSavedWhole(t *testing.T) {
	ctx := context.Background()
	var rec streams
	model := &wordModel{answer: "The deploy went fine."}
	a := newStreamingAgent(t, model, graph.NewMemoryStore(graph.MemoryOptions{}), &rec)
	res, err := a.Graph().Start(ctx, "t1", agent.NewState("t1", "U_ALICE", "C1", "deploy?"), graph.RunConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`thinking@1:"" calls=false`,
		`writing@1:"The " calls=false`,
		`writing@1:"The deploy " calls=false`,
		`writing@1:"The deploy went " calls=false`,
		`writing@1:"The deploy went fine." calls=false`,
		`written@1:"The deploy went fine." calls=false`,
	}
	if got := rec.list(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("OnStream was told\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := assistantTexts(res.State); strings.Join(got, "|") != "The deploy went fine." {
		t.Errorf("saved assistant messages = %q, want the one complete answer", got)
	}
}

// TestCrashMidStream: whether the model call fails, the client panics or
// the process dies while the answer streams, the conversation never holds
// the half answer, and the step runs again: the model is asked again and
// its whole answer is saved once.
func TestCrashMidStream(t *testing.T) {
	for _, how := range []string{"fail", "panic", "kill"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			store := &dyingStore{Store: graph.NewMemoryStore(graph.MemoryOptions{})}
			model := &wordModel{answer: "All three calls are done now.", stopAt: 2, how: how, kill: store.kill}
			var before streams
			a := newStreamingAgent(t, model, store, &before)
			_, _ = a.Graph().Start(ctx, "t1", agent.NewState("t1", "U_ALICE", "C1", "go"), graph.RunConfig{})
			if got := before.list(); len(got) != 3 || !strings.Contains(got[2], `"All three "`) {
				t.Fatalf("before the crash OnStream was told %q, want thinking and two words", got)
			}

			// What the next process finds: a failed run (fail, panic), or
			// nothing (kill: a turn is first written with the model's
			// reply; its caller still holds the request and starts again).
			res, err := a.Graph().State(ctx, "t1")
			if how == "kill" {
				if !errors.Is(err, graph.ErrNoCheckpoint) {
					t.Fatalf("after the process died mid-turn State() = %v, %v; want no checkpoint", res, err)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if got := assistantTexts(res.State); len(got) != 0 {
				t.Fatalf("after the crash the conversation holds %q, want no assistant message", got)
			}
			if store.dead {
				store.mu.Lock()
				store.dead = false // a new process
				store.mu.Unlock()
			}
			var after streams
			b := newStreamingAgent(t, model, store, &after)
			switch {
			case how == "kill":
				res, err = b.Graph().Start(ctx, "t1", agent.NewState("t1", "U_ALICE", "C1", "go"), graph.RunConfig{})
			case res.Status() == graph.Failed:
				res, err = b.Graph().Resume(ctx, "t1", nil)
			default:
				t.Fatalf("after the crash the run is %s, want failed", res.Status())
			}
			if err != nil {
				t.Fatalf("carrying the run on: %v", err)
			}
			if res.Status() != graph.Done {
				t.Fatalf("run = %s (%s), want done", res.Status(), res.Checkpoint.Error)
			}
			if got := assistantTexts(res.State); strings.Join(got, "|") != "All three calls are done now." {
				t.Errorf("saved assistant messages = %q, want the one complete answer", got)
			}
			got := after.list()
			if len(got) == 0 || got[0] != `thinking@1:"" calls=false` || got[len(got)-1] != `written@1:"All three calls are done now." calls=false` {
				t.Errorf("after recovery OnStream was told %q, want the answer streamed again from the start", got)
			}
			if model.calls != 2 {
				t.Errorf("model called %d times, want 2 (the cut-off call and its re-run)", model.calls)
			}
		})
	}
}

// TestStreamedTurnWithCalls: a reply that asks for tool calls is streamed
// too, and its end says so.
func TestStreamedTurnWithCalls(t *testing.T) {
	ctx := context.Background()
	var rec streams
	model := llmtest.NewScripted(llmtest.Reply("Looking it up.", llmtest.Call("c1", "lookup", `{"n":1}`)), llmtest.Reply("Found it."))
	a := newStreamingAgent(t, model, graph.NewMemoryStore(graph.MemoryOptions{}), &rec)
	res, err := a.Graph().Start(ctx, "t1", agent.NewState("t1", "U_ALICE", "C1", "look"), graph.RunConfig{})
	if err != nil || res.Status() != graph.Done {
		t.Fatalf("Start() = %v, %v", res, err)
	}
	got := strings.Join(rec.list(), "\n")
	for _, want := range []string{`written@1:"Looking it up." calls=true`, `written@3:"Found it." calls=false`} {
		if !strings.Contains(got, want) {
			t.Errorf("OnStream was told\n%s\nwant %s", got, want)
		}
	}
}

func assistantTexts(s agent.State) []string {
	var out []string
	for _, m := range s.Messages {
		if m.Role == llm.RoleAssistant && m.Content != "" {
			out = append(out, m.Content)
		}
	}
	return out
}
