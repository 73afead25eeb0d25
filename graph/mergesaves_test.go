package graph_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/countersign/countersign/graph"
)

// split is the state of a graph whose steps are of every kind: one node,
// two nodes at once, a barrier's target and a subgraph.
type split struct {
	Log   []string `json:"log"`
	Left  string   `json:"left"`
	Right string   `json:"right"`
}

// splitGraph: a → (b ∥ c) → join d (the doc subgraph, which pauses for a
// review) → e. Every node saves before its side effect, which sends counts.
func splitGraph(t *testing.T, merge bool, sends *execLog) *graph.Graph[split] {
	t.Helper()
	node := func(name string, edit func(*split)) graph.NodeFunc[split] {
		return func(ctx context.Context, s *split, save graph.SaveFunc) error {
			edit(s)
			if err := save(ctx); err != nil {
				return err
			}
			sends.add(name)
			return nil
		}
	}
	var log execLog
	sub := graph.Nest(docGraph(t, &log),
		func(s *split) doc { return doc{Lines: []string{s.Left + s.Right}} },
		func(s *split, d *doc) { s.Log = append(s.Log, d.Lines...) })
	g, err := graph.New[split]().
		AddNode("a", node("a", func(s *split) { s.Log = append(s.Log, "a") })).
		AddNode("b", node("b", func(s *split) { s.Left = "b" })).
		AddNode("c", node("c", func(s *split) { s.Right = "c" })).
		AddSubgraph("d", sub).
		AddNode("e", node("e", func(s *split) { s.Log = append(s.Log, "e") })).
		AddEdge(graph.Start, "a").AddEdge("a", "b").AddEdge("a", "c").
		AddJoin([]string{"b", "c"}, "d").AddEdge("d", "e").
		Compile(newStore(), graph.Options{MergeSaves: merge})
	if err != nil {
		t.Fatalf("Compile() = %v", err)
	}
	return g
}

// With merged saves, a graph with concurrent steps, a barrier and a
// subgraph ends as it does without them: every side effect once, the same
// state, the answer reaching the subgraph, and a history whose checkpoints
// follow one another — in fewer of them.
func TestMergedSavesAcrossEveryKindOfStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type outcome struct {
		state split
		saves int
	}
	runs := map[bool]outcome{}
	for _, merge := range []bool{false, true} {
		var sends execLog
		g := splitGraph(t, merge, &sends)
		res, err := g.Start(ctx, "t", split{}, graph.RunConfig{})
		if err != nil || res.Status() != graph.Paused {
			t.Fatalf("merge %v: Start() = %v, %v; want paused in the subgraph", merge, res, err)
		}
		res, err = graph.ResumeNested(ctx, g, "t", func(_ context.Context, _ graph.NodePath, d *doc) error {
			d.Reviewed = true
			return nil
		})
		if err != nil || res.Status() != graph.Done {
			t.Fatalf("merge %v: ResumeNested() = %v, %v; want done", merge, res, err)
		}
		sent := sends.take()
		slices.Sort(sent)
		if !slices.Equal(sent, []string{"a", "b", "c", "e"}) {
			t.Errorf("merge %v: sent by %q, want each of a, b, c, e once", merge, sent)
		}
		hist, err := g.History(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		for i, cp := range hist { // newest first
			if want := int64(len(hist) - i); cp.Seq != want {
				t.Fatalf("merge %v: checkpoint %d of the history has seq %d, want %d", merge, i, cp.Seq, want)
			}
			if i+1 < len(hist) && cp.Parent != hist[i+1].ID {
				t.Fatalf("merge %v: checkpoint %d follows %q, not the one before it (%q)", merge, cp.Seq, cp.Parent, hist[i+1].ID)
			}
		}
		runs[merge] = outcome{res.State, len(hist)}
	}
	plain, merged := runs[false], runs[true]
	want := []string{"a", "bc", "draft", "review", "publish", "e"}
	for merge, o := range runs {
		if !slices.Equal(o.state.Log, want) {
			t.Errorf("merge %v: log %q, want %q", merge, o.state.Log, want)
		}
	}
	if merged.saves >= plain.saves {
		t.Errorf("merged saves wrote %d checkpoints, unmerged %d: want fewer", merged.saves, plain.saves)
	}
}

// With merged saves a pass (Start, Continue) whose first node has no
// side effect writes nothing before that node; should the node fail, the
// failed checkpoint holds the input the pass began with, and a retry
// runs it again from there. Start on an existing thread is still refused,
// even though the refusal now comes from the pass's first write.
func TestPassStartIsWrittenWithItsFirstSave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fail := true
	var calls int
	g, err := graph.New[split]().
		AddNode("think", func(_ context.Context, s *split, _ graph.SaveFunc) error {
			calls++
			s.Log = append(s.Log, "half a thought") // left behind by a failure
			if fail {
				return errors.New("model down")
			}
			s.Left = "answer to " + s.Log[0]
			return nil
		}).
		AddEdge(graph.Start, "think").
		Compile(newStore(), graph.Options{MergeSaves: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Start(ctx, "t", split{Log: []string{"question"}}, graph.RunConfig{})
	var nodeErr *graph.NodeError
	if !errors.As(err, &nodeErr) || res == nil || res.Status() != graph.Failed {
		t.Fatalf("Start() = %v, %v; want a failed run", res, err)
	}
	saved, err := g.State(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if saved.Status() != graph.Failed || saved.Checkpoint.Seq != 1 || !slices.Equal(saved.State.Log, []string{"question"}) {
		t.Fatalf("saved: status %s seq %d log %q; want failed, seq 1, the input alone", saved.Status(), saved.Checkpoint.Seq, saved.State.Log)
	}
	fail = false
	res, err = g.Resume(ctx, "t", nil)
	if err != nil || res.Status() != graph.Done || res.State.Left != "answer to question" {
		t.Fatalf("Resume() = %+v, %v; want done with the answer", res, err)
	}
	if calls != 2 {
		t.Errorf("node ran %d times, want 2", calls)
	}
	if _, err := g.Start(ctx, "t", split{Log: []string{"again"}}, graph.RunConfig{}); !errors.Is(err, graph.ErrThreadExists) {
		t.Errorf("Start() on an existing thread = %v, want ErrThreadExists", err)
	}
	if calls != 3 {
		t.Errorf("node ran %d times, want 3 (the refused Start ran it once, with no side effect)", calls)
	}
	after, err := g.State(ctx, "t")
	if err != nil || after.Checkpoint.ID != res.Checkpoint.ID {
		t.Errorf("the refused Start changed the thread: %v, %v", after, err)
	}
}
