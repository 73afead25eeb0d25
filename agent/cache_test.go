package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
)

// TestAnotherProcessesWriteIsNeverMissed: two processes (two agents on
// one store) take turns in one conversation. Each keeps the state it last
// saw and starts from it, but a turn taken by the other is never lost or
// overwritten: every answer is to its own turn, in order, and both see
// the whole conversation.
func TestAnotherProcessesWriteIsNeverMissed(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func() graph.Store) {
		ctx := context.Background()
		store := newStore()
		chat := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return nil }}
		a, b := newFixture(t, store, chat, true), newFixture(t, store, chat, true)
		if _, err := a.g.Start(ctx, "t", agent.NewState("t", "U_ALICE", "C1", "one"), graph.RunConfig{}); err != nil {
			t.Fatal(err)
		}
		turns := []struct {
			f    *fixture
			text string
		}{{b, "two"}, {a, "three"}, {a, "four"}, {b, "five"}}
		for _, turn := range turns {
			res, err := turn.f.g.Continue(ctx, "t", agent.UserTurn("U_ALICE", turn.text))
			if err != nil {
				t.Fatalf("Continue(%q) = %v", turn.text, err)
			}
			if got, want := res.State.Answer(), "You said: "+turn.text; got != want {
				t.Errorf("Continue(%q) answered %q, want %q", turn.text, got, want)
			}
		}
		want := "one|You said: one|two|You said: two|three|You said: three|four|You said: four|five|You said: five"
		for name, f := range map[string]*fixture{"a": a, "b": b} {
			res, err := f.g.State(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range res.State.Messages {
				got = append(got, m.Content)
			}
			if strings.Join(got, "|") != want {
				t.Errorf("process %s sees %q, want %q", name, strings.Join(got, "|"), want)
			}
		}
	})
}

// TestStalePauseFromTheCache: a process answers a pause it cached after
// another process had answered it and gone on. The answer is refused
// (ErrConflict), nothing runs, and the other process's progress stands.
func TestStalePauseFromTheCache(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func() graph.Store) {
		ctx := context.Background()
		store := newStore()
		a := newFixture(t, store, nil, true)
		b := newFixture(t, store, nil, true)
		paused, err := a.g.Start(ctx, "t", agent.NewState("t", "U_ALICE", "C1", "ship it"), graph.RunConfig{})
		if err != nil || paused.Status() != graph.Paused {
			t.Fatalf("Start() = %v, %v; want paused", paused, err)
		}
		key := func(tool string) string {
			for _, c := range paused.State.Waiting() {
				if c.Tool == tool {
					return c.Key
				}
			}
			t.Fatalf("no %s call waits", tool)
			return ""
		}
		approve := map[string]agent.Decision{key("deploy"): script["deploy"]}
		if _, err := b.g.ResumeAt(ctx, "t", paused.Checkpoint.ID, b.agent.Decide(approve)); err != nil {
			t.Fatalf("ResumeAt by the other process = %v", err)
		}
		reject := map[string]agent.Decision{key("delete"): script["delete"]}
		_, err = a.g.ResumeAt(ctx, "t", paused.Checkpoint.ID, a.agent.Decide(reject))
		if !errors.Is(err, graph.ErrConflict) {
			t.Errorf("ResumeAt of the stale pause = %v, want ErrConflict", err)
		}
		res, err := a.g.State(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		d, _ := res.State.Call(key("deploy"))
		del, _ := res.State.Call(key("delete"))
		if res.Status() != graph.Paused || d.Status != agent.Done || del.Status != agent.Pending {
			t.Errorf("after the stale answer: %s, deploy %s, delete %s; want paused, done, pending", res.Status(), d.Status, del.Status)
		}
		if n := len(a.deploy.Runs()) + len(b.deploy.Runs()); n != 1 {
			t.Errorf("deploy ran %d times, want 1", n)
		}
	})
}
