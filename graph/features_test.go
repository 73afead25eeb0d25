package graph_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/interrupt"
)

// execLog records completed node executions, in the order they finish.
type execLog struct {
	mu   sync.Mutex
	runs []string
}

func (l *execLog) add(n string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, n)
}

func (l *execLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.runs
	l.runs = nil
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// mafWorkflow is the workflow of the MAF checkpointing article:
// foo → bar, baz; bar → qux; (baz, qux) → quux. gated nodes pause (a
// dynamic interrupt) until their copy of the state is approved.
func mafWorkflow(t *testing.T, store graph.Store, log *execLog, gated ...string) *graph.Graph[state] {
	t.Helper()
	node := func(name string) graph.NodeFunc[state] {
		return func(_ context.Context, s *state, _ graph.SaveFunc) error {
			if slices.Contains(gated, name) && !s.Approved {
				return interrupt.New(interrupt.Info{Reason: "approval"})
			}
			s.Visits = append(s.Visits, name)
			log.add(name)
			return nil
		}
	}
	b := graph.New[state]()
	for _, n := range []string{"foo", "bar", "baz", "qux", "quux"} {
		b.AddNode(n, node(n))
	}
	g, err := b.AddEdge(graph.Start, "foo").
		AddEdge("foo", "bar").AddEdge("foo", "baz").
		AddEdge("bar", "qux").
		AddJoin([]string{"baz", "qux"}, "quux").
		AddEdge("quux", graph.End).
		AddReducer("Visits", graph.Append[string]()).
		AddReducer("Approved", graph.Reduce(func(_ bool, changed []bool) bool { return slices.Contains(changed, true) })).
		Compile(store, graph.Options{})
	if err != nil {
		t.Fatalf("Compile() = %v", err)
	}
	return g
}

// TestMAFWorkflowBarrierAndForkAtEveryCheckpoint: quux runs once, after
// both baz and qux; forking at any checkpoint of the run's history and
// driving the fork runs exactly the executions that followed that
// checkpoint in the direct run.
func TestMAFWorkflowBarrierAndForkAtEveryCheckpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		gated []string
		cfg   graph.RunConfig
	}{
		{"straight through", nil, graph.RunConfig{}},
		{"pause between the two arrivals", nil, graph.RunConfig{InterruptAfter: []string{"baz"}, InterruptBefore: []string{"qux"}}},
		{"a branch pauses inside the step", []string{"baz"}, graph.RunConfig{}},
		{"both branches pause", []string{"bar", "baz"}, graph.RunConfig{InterruptBefore: []string{"quux"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			var log execLog
			store := newStore()
			g := mafWorkflow(t, store, &log, tt.gated...)
			if _, err := g.Start(ctx, "direct", state{}, tt.cfg); err != nil {
				t.Fatalf("Start() = %v", err)
			}
			res, err := drive(ctx, g, "direct")
			if err != nil {
				t.Fatalf("drive(direct) = %v", err)
			}
			want := []string{"foo", "bar", "baz", "qux", "quux"}
			if got := log.take(); !slices.Equal(sorted(got), sorted(want)) {
				t.Fatalf("direct run executed %v, want each of %v once", got, want)
			}
			if !slices.Equal(res.State.Visits, want) {
				t.Fatalf("direct run's merged visits = %v, want %v", res.State.Visits, want)
			}
			hist, err := g.History(ctx, "direct")
			if err != nil {
				t.Fatal(err)
			}
			for i, cp := range hist {
				// What had run by this checkpoint: the merged visits, and
				// the nodes of the step that had finished.
				before := slices.Clone(res.State.Visits[:cp.JournalLen])
				for _, w := range cp.Writes {
					if w.Done {
						before = append(before, w.Node)
					}
				}
				var after []string
				for _, n := range want {
					if !slices.Contains(before, n) {
						after = append(after, n)
					}
				}
				fork := fmt.Sprintf("fork-%d", i)
				if _, err := g.Fork(ctx, "direct", cp.ID, fork); err != nil {
					t.Fatalf("Fork(%s) = %v", cp.ID, err)
				}
				got, err := drive(ctx, g, fork)
				if err != nil {
					t.Fatalf("drive(fork of step %d %s) = %v", cp.Step, cp.Status, err)
				}
				if ran := log.take(); !slices.Equal(sorted(ran), sorted(after)) {
					t.Errorf("fork of step %d (%s, next %v, arrivals %v) executed %v, want %v", cp.Step, cp.Status, cp.Next, cp.Arrivals, ran, after)
				}
				if !slices.Equal(got.State.Visits, want) {
					t.Errorf("fork of step %d visits = %v, want %v", cp.Step, got.State.Visits, want)
				}
			}
		})
	}
}

// TestJoinArrivalsAreInTheCheckpoint: paused after baz, the checkpoint
// says baz has arrived at the barrier and quux waits for qux.
func TestJoinArrivalsAreInTheCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log execLog
	g := mafWorkflow(t, newStore(), &log)
	res, err := g.Start(ctx, "t", state{}, graph.RunConfig{InterruptBefore: []string{"qux"}})
	if err != nil || res.Status() != graph.Paused {
		t.Fatalf("Start() = %v, %v; want paused before qux", res, err)
	}
	if a := res.Checkpoint.Arrivals["baz+qux>quux"]; !slices.Equal(a, []string{"baz"}) {
		t.Errorf("arrivals = %v, want baz arrived at the join", res.Checkpoint.Arrivals)
	}
	if slices.Contains(log.take(), "quux") {
		t.Error("quux ran before qux arrived")
	}
}

// TestStepNodesRunConcurrently: two nodes of one step each wait until the
// other has started; run one after the other, neither would finish.
func TestStepNodesRunConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	started := map[string]chan struct{}{"x": make(chan struct{}), "y": make(chan struct{})}
	other := map[string]string{"x": "y", "y": "x"}
	node := func(name string) graph.NodeFunc[state] {
		return func(ctx context.Context, s *state, _ graph.SaveFunc) error {
			close(started[name])
			select {
			case <-started[other[name]]:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("%s ran alone: %s never started", name, other[name])
			}
			s.Visits = append(s.Visits, name)
			return nil
		}
	}
	g, err := graph.New[state]().AddNode("x", node("x")).AddNode("y", node("y")).
		AddEdge(graph.Start, "x").AddEdge(graph.Start, "y").
		AddReducer("Visits", graph.Append[string]()).
		Compile(newStore(), graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Start(ctx, "t", state{}, graph.RunConfig{})
	if err != nil || res.Status() != graph.Done || !slices.Equal(res.State.Visits, []string{"x", "y"}) {
		t.Fatalf("Start() = %v, %v; want done with visits [x y]", res, err)
	}
}

// TestMergeIsDeterministic: whichever node finishes first, the merged
// state lists the nodes' changes in the order the step scheduled them.
func TestMergeIsDeterministic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, first := range []string{"x", "y"} {
		t.Run(first+" finishes first", func(t *testing.T) {
			done := make(chan struct{})
			node := func(name string) graph.NodeFunc[state] {
				return func(ctx context.Context, s *state, _ graph.SaveFunc) error {
					if name != first {
						<-done
					}
					s.Visits = append(s.Visits, name+"1", name+"2")
					if name == first {
						close(done)
					}
					return nil
				}
			}
			g, err := graph.New[state]().AddNode("x", node("x")).AddNode("y", node("y")).
				AddEdge(graph.Start, "x").AddEdge(graph.Start, "y").
				AddReducer("Visits", graph.Append[string]()).
				Compile(newStore(), graph.Options{})
			if err != nil {
				t.Fatal(err)
			}
			res, err := g.Start(ctx, "t", state{Visits: []string{"start"}}, graph.RunConfig{})
			if want := []string{"start", "x1", "x2", "y1", "y2"}; err != nil || !slices.Equal(res.State.Visits, want) {
				t.Fatalf("Start() = %v, %v; want visits %v", res, err, want)
			}
		})
	}
}

// TestMergeConflictNamesTheField: two nodes set one field differently and
// it has no reducer: the step fails, naming the field and the nodes.
func TestMergeConflictNamesTheField(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	set := func(n int) graph.NodeFunc[state] {
		return func(_ context.Context, s *state, _ graph.SaveFunc) error { s.Tries = n; return nil }
	}
	g, err := graph.New[state]().AddNode("x", set(1)).AddNode("y", set(2)).
		AddEdge(graph.Start, "x").AddEdge(graph.Start, "y").
		Compile(newStore(), graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Start(ctx, "t", state{}, graph.RunConfig{})
	var merr *graph.MergeError
	if !errors.As(err, &merr) || !slices.Equal(merr.Fields, []string{"Tries (changed by x, y)"}) {
		t.Fatalf("Start() error = %v, want a MergeError naming Tries, x and y", err)
	}
	if res.Status() != graph.Failed {
		t.Errorf("status = %s, want failed", res.Status())
	}
	// Declaring a reducer on a field the state lacks is a build error.
	if _, err := graph.New[state]().AddNode("x", set(1)).AddEdge(graph.Start, "x").
		AddReducer("Nope", graph.Append[string]()).Compile(newStore(), graph.Options{}); err == nil || !strings.Contains(err.Error(), "Nope") {
		t.Errorf("Compile(reducer on a missing field) = %v, want an error naming it", err)
	}
	if _, err := graph.New[state]().AddNode("x", set(1)).AddEdge(graph.Start, "x").
		AddReducer("Tries", graph.Append[string]()).Compile(newStore(), graph.Options{}); err == nil {
		t.Error("Compile(reducer of the wrong type) = nil, want an error")
	}
}

// TestSeveralInterruptsAnsweredOneAtATime: p and q pause in one step with
// distinct IDs; answering p runs p only, and the run pauses again on q
// under the same ID; answering q finishes the step.
func TestSeveralInterruptsAnsweredOneAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c counter
	gate := func(name string) graph.NodeFunc[state] {
		return func(ctx context.Context, s *state, save graph.SaveFunc) error {
			c.mu.Lock()
			if c.n == nil {
				c.n = map[string]int{}
			}
			c.n[name+"-tries"]++
			c.mu.Unlock()
			if !s.Approved {
				return interrupt.New(interrupt.Info{Reason: "approval", Payload: []byte(`"` + name + `"`)})
			}
			return c.visit(name)(ctx, s, save)
		}
	}
	g, err := graph.New[state]().AddNode("p", gate("p")).AddNode("q", gate("q")).AddNode("r", c.visit("r")).AddNode("z", c.visit("z")).
		AddEdge(graph.Start, "p").AddEdge(graph.Start, "q").AddEdge(graph.Start, "r").
		AddJoin([]string{"p", "q", "r"}, "z").
		AddReducer("Visits", graph.Append[string]()).
		Compile(newStore(), graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Start(ctx, "t", state{}, graph.RunConfig{})
	if err != nil || res.Status() != graph.Paused || len(res.Interrupts()) != 2 {
		t.Fatalf("Start() = %v, %v; want paused on two interrupts", res, err)
	}
	ids := map[string]string{}
	for _, in := range res.Interrupts() {
		ids[in.Path[0]] = in.ID
	}
	if ids["p"] == "" || ids["q"] == "" || ids["p"] == ids["q"] {
		t.Fatalf("interrupt IDs = %v, want distinct IDs for p and q", ids)
	}
	approve := func(_ context.Context, path graph.NodePath, s *state) error {
		if path.String() != "p" {
			return fmt.Errorf("modifier got path %s, want p", path)
		}
		s.Approved = true
		return nil
	}
	res, err = g.Answer(ctx, "t", ids["p"], approve)
	if err != nil {
		t.Fatalf("Answer(p) = %v", err)
	}
	if in := res.Interrupts(); res.Status() != graph.Paused || len(in) != 1 || in[0].ID != ids["q"] {
		t.Fatalf("after answering p: %s %+v, want paused on q only, id %s", res.Status(), in, ids["q"])
	}
	if c.get("p") != 1 || c.get("q-tries") != 1 || c.get("r") != 1 || c.get("z") != 0 {
		t.Fatalf("after answering p: p %d, q tried %d, r %d, z %d; want 1 1 1 0", c.get("p"), c.get("q-tries"), c.get("r"), c.get("z"))
	}
	if _, err := g.Answer(ctx, "t", ids["p"], approve); !errors.Is(err, graph.ErrNoInterrupt) {
		t.Errorf("Answer(p again) = %v, want ErrNoInterrupt", err)
	}
	res, err = g.Answer(ctx, "t", ids["q"], func(_ context.Context, _ graph.NodePath, s *state) error { s.Approved = true; return nil })
	if err != nil {
		t.Fatalf("Answer(q) = %v", err)
	}
	if want := []string{"p", "q", "r", "z"}; res.Status() != graph.Done || !slices.Equal(res.State.Visits, want) {
		t.Fatalf("after answering q: %s %v, want done %v", res.Status(), res.State.Visits, want)
	}
	for _, n := range []string{"p", "q", "r", "z"} {
		if c.get(n) != 1 {
			t.Errorf("%s ran %d times, want 1", n, c.get(n))
		}
	}
}

// TestFailingBranchKeepsTheOthersWork: good finishes, bad fails; the
// failed checkpoint keeps good's work, and resuming runs bad only.
func TestFailingBranchKeepsTheOthersWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c counter
	bad := func(_ context.Context, s *state, _ graph.SaveFunc) error {
		if s.FailOnce {
			return errors.New("tool unavailable")
		}
		s.Visits = append(s.Visits, "bad")
		return nil
	}
	g, err := graph.New[state]().AddNode("good", c.visit("good")).AddNode("bad", bad).AddNode("z", c.visit("z")).
		AddEdge(graph.Start, "good").AddEdge(graph.Start, "bad").
		AddJoin([]string{"good", "bad"}, "z").
		AddReducer("Visits", graph.Append[string]()).
		Compile(newStore(), graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Start(ctx, "t", state{FailOnce: true}, graph.RunConfig{})
	var nodeErr *graph.NodeError
	if !errors.As(err, &nodeErr) || nodeErr.Node != "bad" || res.Status() != graph.Failed {
		t.Fatalf("Start() = %v; want bad's failure saved", err)
	}
	if w := res.Checkpoint.Writes; len(w) != 1 || w[0].Node != "good" || !w[0].Done {
		t.Fatalf("failed checkpoint writes = %+v, want good's finished work", w)
	}
	res, err = g.Resume(ctx, "t", func(_ context.Context, path graph.NodePath, s *state) error {
		if path.String() != "bad" {
			return fmt.Errorf("path %s, want bad", path)
		}
		s.FailOnce = false
		return nil
	})
	if want := []string{"good", "bad", "z"}; err != nil || !slices.Equal(res.State.Visits, want) || c.get("good") != 1 {
		t.Fatalf("Resume() = %v; visits %v, good ran %d; want %v, good once", err, res.State.Visits, c.get("good"), want)
	}
}

// TestResumingAMergeConflictFailsAgain: every node of the step finished
// but their changes conflict; resuming merges again (nothing re-runs) and
// fails again, rather than pausing on nothing.
func TestResumingAMergeConflictFailsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c counter
	set := func(name string, n int) graph.NodeFunc[state] {
		return func(ctx context.Context, s *state, save graph.SaveFunc) error {
			s.Tries = n
			return c.visit(name)(ctx, s, save)
		}
	}
	g, err := graph.New[state]().AddNode("x", set("x", 1)).AddNode("y", set("y", 2)).
		AddEdge(graph.Start, "x").AddEdge(graph.Start, "y").
		AddReducer("Visits", graph.Append[string]()).
		Compile(newStore(), graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Start(ctx, "t", state{}, graph.RunConfig{}); err == nil {
		t.Fatal("Start() = nil error, want the merge conflict")
	}
	res, err := g.Resume(ctx, "t", nil)
	var merr *graph.MergeError
	if !errors.As(err, &merr) || res.Status() != graph.Failed {
		t.Fatalf("Resume() = %v, %v; want failed again on the conflict", res, err)
	}
	if c.get("x") != 1 || c.get("y") != 1 {
		t.Errorf("x ran %d, y %d times; want once each", c.get("x"), c.get("y"))
	}
}
