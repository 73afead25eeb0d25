package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/interrupt"
)

// state is the test graphs' state: a log of node visits kept as a journal,
// and a few fields nodes and modifiers use.
type state struct {
	Visits   []string `json:"-"`
	Approved bool     `json:"approved"`
	Tries    int      `json:"tries"`
	FailOnce bool     `json:"fail_once"`
}

func (s *state) JournalLen() int { return len(s.Visits) }

func (s *state) MarshalJournal(from int) ([]json.RawMessage, error) {
	var out []json.RawMessage
	for _, v := range s.Visits[from:] {
		b, _ := json.Marshal(v)
		out = append(out, b)
	}
	return out, nil
}

func (s *state) UnmarshalJournal(entries []json.RawMessage) error {
	s.Visits = nil
	for _, e := range entries {
		var v string
		if err := json.Unmarshal(e, &v); err != nil {
			return err
		}
		s.Visits = append(s.Visits, v)
	}
	return nil
}

// counter counts node executions across runs and resumes.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) visit(name string) func(context.Context, *state, graph.SaveFunc) error {
	return func(_ context.Context, s *state, _ graph.SaveFunc) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[name]++
		s.Visits = append(s.Visits, name)
		return nil
	}
}

func (c *counter) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func newStore() graph.Store { return graph.NewMemoryStore(graph.MemoryOptions{}) }

func linear(t *testing.T, c *counter, store graph.Store, opts graph.Options) *graph.Graph[state] {
	t.Helper()
	g, err := graph.New[state]().
		AddNode("a", c.visit("a")).
		AddNode("b", c.visit("b")).
		AddNode("c", c.visit("c")).
		AddEdge(graph.Start, "a").AddEdge("a", "b").AddEdge("b", "c").AddEdge("c", graph.End).
		Compile(store, opts)
	if err != nil {
		t.Fatalf("Compile() = %v", err)
	}
	return g
}

func TestLinearRunCheckpointsEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c counter
	store := newStore()
	g := linear(t, &c, store, graph.Options{})
	res, err := g.Start(ctx, "t1", state{}, graph.RunConfig{})
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if res.Status() != graph.Done || !slices.Equal(res.State.Visits, []string{"a", "b", "c"}) {
		t.Fatalf("Start() = %s %v, want done [a b c]", res.Status(), res.State.Visits)
	}
	hist, err := g.History(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	// The initial checkpoint, then one per step: after a, after b, and
	// after c, which is the final one.
	var steps []int
	for _, cp := range hist {
		steps = append(steps, cp.Step)
	}
	if want := []int{3, 2, 1, 0}; !slices.Equal(steps, want) {
		t.Errorf("History steps = %v, want %v", steps, want)
	}
	for i := 0; i+1 < len(hist); i++ {
		if hist[i].Parent != hist[i+1].ID {
			t.Errorf("checkpoint %d parent = %q, want %q", i, hist[i].Parent, hist[i+1].ID)
		}
	}
	if _, err := g.Start(ctx, "t1", state{}, graph.RunConfig{}); !errors.Is(err, graph.ErrThreadExists) {
		t.Errorf("Start(existing) = %v, want ErrThreadExists", err)
	}
}

func TestStaticInterrupts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		opts       graph.Options
		cfg        graph.RunConfig
		wantBefore []string // visits when paused
		wantReason string
	}{
		{"before at compile time", graph.Options{InterruptBefore: []string{"b"}}, graph.RunConfig{}, []string{"a"}, "before:b"},
		{"after at compile time", graph.Options{InterruptAfter: []string{"b"}}, graph.RunConfig{}, []string{"a", "b"}, "after:b"},
		{"before per run", graph.Options{}, graph.RunConfig{InterruptBefore: []string{"c"}}, []string{"a", "b"}, "before:c"},
		{"after per run", graph.Options{}, graph.RunConfig{InterruptAfter: []string{"a"}}, []string{"a"}, "after:a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			var c counter
			g := linear(t, &c, newStore(), tt.opts)
			res, err := g.Start(ctx, "t", state{}, tt.cfg)
			if err != nil {
				t.Fatalf("Start() = %v", err)
			}
			if res.Status() != graph.Paused || !slices.Equal(res.State.Visits, tt.wantBefore) {
				t.Fatalf("Start() = %s %v, want paused %v", res.Status(), res.State.Visits, tt.wantBefore)
			}
			if got := res.Interrupts()[0].Reason; got != tt.wantReason {
				t.Errorf("interrupt reason = %q, want %q", got, tt.wantReason)
			}
			res, err = g.Resume(ctx, "t", nil)
			if err != nil {
				t.Fatalf("Resume() = %v", err)
			}
			if res.Status() != graph.Done || !slices.Equal(res.State.Visits, []string{"a", "b", "c"}) {
				t.Fatalf("Resume() = %s %v, want done [a b c]", res.Status(), res.State.Visits)
			}
			for _, n := range []string{"a", "b", "c"} {
				if c.get(n) != 1 {
					t.Errorf("node %s ran %d times, want 1", n, c.get(n))
				}
			}
		})
	}
}

// approvalGraph: a → gate → done. gate interrupts until Approved is set,
// counting its tries in the state: on resume it must see the state it had.
func approvalGraph(t *testing.T, store graph.Store, c *counter) *graph.Graph[state] {
	t.Helper()
	gate := func(_ context.Context, s *state, _ graph.SaveFunc) error {
		s.Tries++
		if !s.Approved {
			return interrupt.New(interrupt.Info{Reason: "approval", Payload: json.RawMessage(`{"call":"x"}`)})
		}
		s.Visits = append(s.Visits, "gate")
		return nil
	}
	g, err := graph.New[state]().
		AddNode("a", c.visit("a")).
		AddNode("gate", gate).
		AddNode("done", c.visit("done")).
		AddEdge(graph.Start, "a").AddEdge("a", "gate").AddEdge("gate", "done").AddEdge("done", graph.End).
		Compile(store, graph.Options{})
	if err != nil {
		t.Fatalf("Compile() = %v", err)
	}
	return g
}

func approve(_ context.Context, path graph.NodePath, s *state) error {
	if path.String() != "gate" {
		return fmt.Errorf("modifier path = %s, want gate", path)
	}
	s.Approved = true
	return nil
}

func TestDynamicInterruptResumesWithTheStateItHad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c counter
	g := approvalGraph(t, newStore(), &c)
	res, err := g.Start(ctx, "t", state{}, graph.RunConfig{})
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	in := res.Interrupts()
	if res.Status() != graph.Paused || len(in) != 1 || in[0].Reason != "approval" || string(in[0].Payload) != `{"call":"x"}` {
		t.Fatalf("Start() = %s %+v, want paused on approval", res.Status(), in)
	}
	firstID := in[0].ID

	// Resuming without approving re-runs the gate, which pauses again at
	// the same pause: same ID, and the gate saw its earlier try.
	res, err = g.Resume(ctx, "t", nil)
	if err != nil {
		t.Fatalf("Resume(no answer) = %v", err)
	}
	if res.Interrupts()[0].ID != firstID || res.State.Tries != 2 {
		t.Fatalf("Resume(no answer) = id %s tries %d, want id %s tries 2", res.Interrupts()[0].ID, res.State.Tries, firstID)
	}

	res, err = g.Resume(ctx, "t", approve)
	if err != nil {
		t.Fatalf("Resume(approve) = %v", err)
	}
	if res.Status() != graph.Done || res.State.Tries != 3 || !slices.Equal(res.State.Visits, []string{"a", "gate", "done"}) {
		t.Fatalf("Resume(approve) = %s tries %d %v, want done tries 3 [a gate done]", res.Status(), res.State.Tries, res.State.Visits)
	}
	if c.get("a") != 1 {
		t.Errorf("node a ran %d times, want 1", c.get("a"))
	}
}

func TestResumeRefusesWhatIsNotPausedOrStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c counter
	store := newStore()
	g := approvalGraph(t, store, &c)
	res, err := g.Start(ctx, "t", state{}, graph.RunConfig{})
	if err != nil {
		t.Fatal(err)
	}
	oldID := res.Checkpoint.ID
	if _, err := g.Resume(ctx, "t", nil); err != nil { // pauses again: new head
		t.Fatal(err)
	}
	before, _ := g.History(ctx, "t")

	if _, err := g.ResumeAt(ctx, "t", oldID, approve); !errors.Is(err, graph.ErrConflict) {
		t.Errorf("ResumeAt(stale) = %v, want ErrConflict", err)
	}
	if _, err := g.Resume(ctx, "nope", approve); !errors.Is(err, graph.ErrNoCheckpoint) {
		t.Errorf("Resume(unknown thread) = %v, want ErrNoCheckpoint", err)
	}
	if _, err := g.Resume(ctx, "t", approve); err != nil {
		t.Fatal(err)
	}
	done, _ := g.History(ctx, "t")
	if _, err := g.Resume(ctx, "t", approve); !errors.Is(err, graph.ErrNotPaused) {
		t.Errorf("Resume(done) = %v, want ErrNotPaused", err)
	}
	if _, err := g.Recover(ctx, "t"); !errors.Is(err, graph.ErrNotPaused) {
		t.Errorf("Recover(done) = %v, want ErrNotPaused", err)
	}
	after, _ := g.History(ctx, "t")
	if len(after) != len(done) || len(done) <= len(before) {
		t.Errorf("history lengths %d → %d → %d: refused resumes must write nothing", len(before), len(done), len(after))
	}
}

func TestConcurrentResumesOneWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c counter
	g := approvalGraph(t, newStore(), &c)
	if _, err := g.Start(ctx, "t", state{}, graph.RunConfig{}); err != nil {
		t.Fatal(err)
	}
	const n = 8
	errs := make(chan error, n)
	var start sync.WaitGroup
	start.Add(1)
	for range n {
		go func() {
			start.Wait()
			_, err := g.Resume(ctx, "t", approve)
			errs <- err
		}()
	}
	start.Done()
	won := 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			won++
		case errors.Is(err, graph.ErrConflict), errors.Is(err, graph.ErrNotPaused):
		default:
			t.Errorf("Resume() = %v, want nil, ErrConflict or ErrNotPaused", err)
		}
	}
	if won != 1 || c.get("done") != 1 {
		t.Errorf("%d resumes won and node done ran %d times, want 1 and 1", won, c.get("done"))
	}
}

func TestFailureSavesInputAndRetriesOnlyTheFailedNode(t *testing.T) {
	t.Parallel()
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprintf("panic=%v", panics), func(t *testing.T) {
			ctx := context.Background()
			var c counter
			flaky := func(_ context.Context, s *state, _ graph.SaveFunc) error {
				s.Visits = append(s.Visits, "flaky-partial") // must be discarded
				s.Tries++
				if s.FailOnce {
					if panics {
						panic("boom")
					}
					return errors.New("model unavailable")
				}
				s.Visits = append(s.Visits[:len(s.Visits)-1], "flaky")
				return nil
			}
			g, err := graph.New[state]().
				AddNode("a", c.visit("a")).AddNode("flaky", flaky).AddNode("z", c.visit("z")).
				AddEdge(graph.Start, "a").AddEdge("a", "flaky").AddEdge("flaky", "z").
				Compile(newStore(), graph.Options{})
			if err != nil {
				t.Fatal(err)
			}
			res, err := g.Start(ctx, "t", state{FailOnce: true}, graph.RunConfig{})
			var nodeErr *graph.NodeError
			if !errors.As(err, &nodeErr) || nodeErr.Node != "flaky" {
				t.Fatalf("Start() error = %v, want a NodeError for flaky", err)
			}
			if res.Status() != graph.Failed || res.Checkpoint.Error == "" {
				t.Fatalf("Start() status = %s error %q, want failed with the error", res.Status(), res.Checkpoint.Error)
			}
			if res.State.Tries != 0 || !slices.Equal(res.State.Visits, []string{"a"}) {
				t.Fatalf("failed state = tries %d %v, want the node's input (0, [a])", res.State.Tries, res.State.Visits)
			}
			res, err = g.Resume(ctx, "t", func(_ context.Context, _ graph.NodePath, s *state) error {
				s.FailOnce = false
				return nil
			})
			if err != nil {
				t.Fatalf("Resume() = %v", err)
			}
			if res.Status() != graph.Done || !slices.Equal(res.State.Visits, []string{"a", "flaky", "z"}) || c.get("a") != 1 {
				t.Fatalf("Resume() = %s %v (a ran %d), want done [a flaky z], a once", res.Status(), res.State.Visits, c.get("a"))
			}
		})
	}
}

// TestFanInRemembersArrivedBranches: start → left, right; both → join.
// right pauses; when it resumes, left must not run again and join must
// run once, having seen both branches.
func TestFanInRemembersArrivedBranches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c counter
	right := func(_ context.Context, s *state, _ graph.SaveFunc) error {
		if !s.Approved {
			return interrupt.InterruptAndRerun()
		}
		s.Visits = append(s.Visits, "right")
		return nil
	}
	g, err := graph.New[state]().
		AddNode("left", c.visit("left")).AddNode("right", right).AddNode("join", c.visit("join")).
		AddEdge(graph.Start, "left").AddEdge(graph.Start, "right").
		AddEdge("left", "join").AddEdge("right", "join").AddEdge("join", graph.End).
		AddReducer("Visits", graph.Append[string]()).
		Compile(newStore(), graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Start(ctx, "t", state{}, graph.RunConfig{})
	if err != nil || res.Status() != graph.Paused {
		t.Fatalf("Start() = %v, %v; want paused", res, err)
	}
	if w := res.Checkpoint.Writes; len(w) != 2 || w[0].Node != "left" || !w[0].Done || w[1].Done {
		t.Errorf("paused checkpoint writes = %+v, want left done and right's paused copy", w)
	}
	res, err = g.Resume(ctx, "t", func(_ context.Context, p graph.NodePath, s *state) error {
		s.Approved = true
		return nil
	})
	if err != nil {
		t.Fatalf("Resume() = %v", err)
	}
	if !slices.Equal(res.State.Visits, []string{"left", "right", "join"}) || c.get("left") != 1 || c.get("join") != 1 {
		t.Errorf("Resume() visits = %v (left %d, join %d), want [left right join] once each", res.State.Visits, c.get("left"), c.get("join"))
	}
}

func TestSaveBeforeSideEffectSurvivesFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	effects := 0
	node := func(ctx context.Context, s *state, save graph.SaveFunc) error {
		if s.Tries == 0 {
			s.Tries = 1 // "running"
			if err := save(ctx); err != nil {
				return err
			}
			effects++
			return errors.New("crashed during the side effect")
		}
		s.Visits = append(s.Visits, fmt.Sprintf("saw-running-%d", s.Tries))
		return nil
	}
	g, err := graph.New[state]().AddNode("tool", node).AddEdge(graph.Start, "tool").Compile(newStore(), graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Start(ctx, "t", state{}, graph.RunConfig{}); err == nil {
		t.Fatal("Start() = nil error, want the node's failure")
	}
	res, err := g.Resume(ctx, "t", nil)
	if err != nil {
		t.Fatalf("Resume() = %v", err)
	}
	if effects != 1 || !slices.Equal(res.State.Visits, []string{"saw-running-1"}) {
		t.Errorf("effects %d, visits %v; want 1 and the re-run seeing the saved running mark", effects, res.State.Visits)
	}
}

func TestForkAndContinue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c counter
	g := approvalGraph(t, newStore(), &c)
	if _, err := g.Start(ctx, "t", state{}, graph.RunConfig{}); err != nil {
		t.Fatal(err)
	}
	res, err := g.Resume(ctx, "t", approve)
	if err != nil {
		t.Fatal(err)
	}
	hist, _ := g.History(ctx, "t")
	// Fork every checkpoint and drive it to the end: same final state.
	for i, cp := range hist {
		fork := fmt.Sprintf("fork-%d", i)
		if _, err := g.Fork(ctx, "t", cp.ID, fork); err != nil {
			t.Fatalf("Fork(%s) = %v", cp.ID, err)
		}
		got, err := drive(ctx, g, fork)
		if err != nil {
			t.Fatalf("drive(%s from %s step %d %s) = %v", fork, cp.ID, cp.Step, cp.Status, err)
		}
		if !slices.Equal(got.State.Visits, res.State.Visits) {
			t.Errorf("fork of %s (step %d %s) visits = %v, want %v", cp.ID, cp.Step, cp.Status, got.State.Visits, res.State.Visits)
		}
	}
	if _, err := g.Fork(ctx, "t", hist[0].ID, "fork-0"); !errors.Is(err, graph.ErrThreadExists) {
		t.Errorf("Fork(into existing) = %v, want ErrThreadExists", err)
	}
	if _, err := g.Fork(ctx, "t", "no-such", "x"); !errors.Is(err, graph.ErrNoCheckpoint) {
		t.Errorf("Fork(unknown checkpoint) = %v, want ErrNoCheckpoint", err)
	}

	// Continue: a new pass on the done thread.
	res, err = g.Continue(ctx, "t", func(_ context.Context, _ graph.NodePath, s *state) error {
		s.Visits = append(s.Visits, "user")
		return nil
	})
	if err != nil {
		t.Fatalf("Continue() = %v", err)
	}
	if want := []string{"a", "gate", "done", "user", "a", "gate", "done"}; !slices.Equal(res.State.Visits, want) {
		t.Errorf("Continue() visits = %v, want %v", res.State.Visits, want)
	}
}

// drive runs a thread to the end, approving whatever pauses.
func drive(ctx context.Context, g *graph.Graph[state], thread string) (*graph.Result[state], error) {
	for range 20 {
		res, err := g.State(ctx, thread)
		if err != nil {
			return nil, err
		}
		switch res.Status() {
		case graph.Done:
			return res, nil
		case graph.Running:
			_, err = g.Recover(ctx, thread)
		default:
			_, err = g.Resume(ctx, thread, func(_ context.Context, _ graph.NodePath, s *state) error {
				s.Approved = true
				return nil
			})
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, errors.New("run did not finish")
}

// recordingStore records what each save sends.
type recordingStore struct {
	graph.Store
	mu    sync.Mutex
	sends []int // journal entries sent per save
}

func (r *recordingStore) Save(ctx context.Context, cp *graph.Checkpoint) error {
	r.mu.Lock()
	r.sends = append(r.sends, len(cp.Journal))
	r.mu.Unlock()
	return r.Store.Save(ctx, cp)
}

func TestSavesSendOnlyNewJournalEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c counter
	rec := &recordingStore{Store: newStore()}
	g := linear(t, &c, rec, graph.Options{})
	long := state{}
	for i := range 500 {
		long.Visits = append(long.Visits, fmt.Sprint("old-", i))
	}
	res, err := g.Start(ctx, "t", long, graph.RunConfig{})
	if err != nil || len(res.State.Visits) != 503 {
		t.Fatalf("Start() = %v, %d visits", err, len(res.State.Visits))
	}
	// First save carries the 500 initial entries; every later save carries
	// only the one its step appended (or none).
	if want := []int{500, 1, 1, 1}; !slices.Equal(rec.sends, want) {
		t.Errorf("journal entries sent per save = %v, want %v", rec.sends, want)
	}
	got, err := g.State(ctx, "t")
	if err != nil || !slices.Equal(got.State.Visits, res.State.Visits) {
		t.Errorf("State() after reload = %d visits, %v; want %d", len(got.State.Visits), err, len(res.State.Visits))
	}
}

func TestCompileRejectsBrokenGraphs(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, *state, graph.SaveFunc) error { return nil }
	tests := []struct {
		name  string
		build func() *graph.Builder[state]
	}{
		{"no start edge", func() *graph.Builder[state] { return graph.New[state]().AddNode("a", noop) }},
		{"unknown target", func() *graph.Builder[state] {
			return graph.New[state]().AddNode("a", noop).AddEdge(graph.Start, "a").AddEdge("a", "b")
		}},
		{"reserved name", func() *graph.Builder[state] {
			return graph.New[state]().AddNode(graph.End, noop).AddEdge(graph.Start, graph.End)
		}},
		{"duplicate node", func() *graph.Builder[state] {
			return graph.New[state]().AddNode("a", noop).AddNode("a", noop).AddEdge(graph.Start, "a")
		}},
	}
	for _, tt := range tests {
		if _, err := tt.build().Compile(newStore(), graph.Options{}); err == nil {
			t.Errorf("Compile(%s) = nil, want an error", tt.name)
		}
	}
	if _, err := graph.New[state]().AddNode("a", noop).AddEdge(graph.Start, "a").
		Compile(newStore(), graph.Options{InterruptBefore: []string{"zz"}}); err == nil {
		t.Error("Compile(interrupt at unknown node) = nil, want an error")
	}
}
