package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

// A conversation read from a store takes a turn's messages (the user's,
// the model's call, the tool's result, the answer) without being
// copied: a long conversation is not copied at every turn.
func TestDecodedConversationTakesATurnInPlace(t *testing.T) {
	var entries []json.RawMessage
	for range 400 {
		entries = append(entries, json.RawMessage(`{"role":"user","content":"hi"}`))
	}
	turn := []llm.Message{{Role: llm.RoleUser}, {Role: llm.RoleAssistant}, {Role: llm.RoleTool}, {Role: llm.RoleAssistant}}
	tests := []struct {
		name   string
		decode func(s *agent.State) error
	}{
		{"UnmarshalJournal", func(s *agent.State) error { return s.UnmarshalJournal(entries) }},
		{"AppendJournal", func(s *agent.State) error {
			if err := s.UnmarshalJournal(entries[:100]); err != nil {
				return err
			}
			var cached agent.State
			cached.ShareJournal(s)
			*s = agent.State{}
			s.ShareJournal(&cached)
			return s.AppendJournal(entries[100:])
		}},
	}
	for _, tt := range tests {
		var s agent.State
		if err := tt.decode(&s); err != nil || len(s.Messages) != 400 {
			t.Fatalf("%s: %d messages, %v; want 400", tt.name, len(s.Messages), err)
		}
		first := &s.Messages[0]
		s.Messages = append(s.Messages, turn...)
		if &s.Messages[0] != first {
			t.Errorf("%s: a turn's messages copied the conversation", tt.name)
		}
	}
}

// A conversation a process keeps in memory grows in place from turn to
// turn: its messages are not copied at every step (only now and then,
// as the room after them runs out). What a caller was handed stays as
// it was: a result's conversation has no room, and an append to it is
// the caller's own.
func TestConversationGrowsInPlace(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func() graph.Store) {
		ctx := context.Background()
		chat := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return nil }}
		f := newFixture(t, newStore(), chat, true)
		res, err := f.g.Start(ctx, "t", agent.NewState("t", "U_ALICE", "C1", "turn 0"), graph.RunConfig{})
		if err != nil {
			t.Fatal(err)
		}
		const turns = 60
		arrays := map[*llm.Message]bool{}
		held := res
		for i := 1; i <= turns; i++ {
			text := fmt.Sprintf("turn %d", i)
			if res, err = f.g.Continue(ctx, "t", agent.UserTurn("U_ALICE", text)); err != nil {
				t.Fatalf("Continue(%q) = %v", text, err)
			}
			if got, want := res.State.Answer(), "You said: "+text; got != want {
				t.Fatalf("Continue(%q) answered %q, want %q", text, got, want)
			}
			arrays[&res.State.Messages[0]] = true
			// The caller appends to what it holds: nothing of it reaches
			// the conversation, nor changes what the next turn appends.
			_ = append(held.State.Messages, llm.Message{Role: llm.RoleUser, Content: "the caller's own"})
			held = res
		}
		if len(arrays) > turns/4 {
			t.Errorf("the conversation was copied %d times in %d turns", len(arrays), turns)
		}
		for _, res := range []*graph.Result[agent.State]{res, mustState(t, f.g, "t")} {
			if n := len(res.State.Messages); n != 2*(turns+1) {
				t.Fatalf("the conversation has %d messages, want %d", n, 2*(turns+1))
			}
			for i, m := range res.State.Messages {
				want := fmt.Sprintf("turn %d", i/2)
				if i%2 == 1 {
					want = "You said: " + want
				}
				if m.Content != want {
					t.Errorf("message %d = %q, want %q", i, m.Content, want)
				}
			}
		}
	})
}

func mustState(t *testing.T, g *graph.Graph[agent.State], thread string) *graph.Result[agent.State] {
	t.Helper()
	res, err := g.State(context.Background(), thread)
	if err != nil {
		t.Fatalf("State(%s) = %v", thread, err)
	}
	return res
}

// Two turns of one conversation taken at once by one process (which the
// runner's lease prevents, but a store's compare-and-set must survive)
// both start from the conversation it keeps in memory: one appends in
// place, the other to a copy of its own, and both turns end up in the
// conversation, each with its own answer (run with -race).
func TestConcurrentTurnsDoNotShareTheirAppends(t *testing.T) {
	ctx := context.Background()
	chat := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return nil }}
	f := newFixture(t, graph.NewMemoryStore(graph.MemoryOptions{}), chat, true)
	if _, err := f.g.Start(ctx, "t", agent.NewState("t", "U_ALICE", "C1", "first"), graph.RunConfig{}); err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		var wg sync.WaitGroup
		for who := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				text := fmt.Sprintf("round %d from %d", round, who)
				for {
					_, err := f.g.Continue(ctx, "t", agent.UserTurn("U_ALICE", text))
					if !errors.Is(err, graph.ErrConflict) {
						if err != nil {
							t.Errorf("Continue(%q) = %v", text, err)
						}
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	msgs := mustState(t, f.g, "t").State.Messages
	if len(msgs) != 2+2*2*20 {
		t.Fatalf("the conversation has %d messages, want %d", len(msgs), 2+2*2*20)
	}
	for i := 0; i < len(msgs); i += 2 {
		if got, want := msgs[i+1].Content, "You said: "+msgs[i].Content; got != want {
			t.Errorf("message %d = %q after %q, want %q", i+1, got, msgs[i].Content, want)
		}
	}
}

// A thread another process wrote, read and then continued — what a
// reply to a card does on a replica that had not seen the thread —
// takes the turn into the conversation the read decoded, without
// copying it: the read leaves the room after the messages to the next
// run. What the read handed its caller stays the caller's: an append to
// it reaches neither the conversation nor the turn.
func TestReadThenContinuedThreadTakesATurnInPlace(t *testing.T) {
	ctx := context.Background()
	store := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: "agent-test-" + randomHex()})
	chat := &agenttest.Planner{Plan: func(string) []llm.ToolCall { return nil }}
	wrote := newFixture(t, store, chat, true)
	if _, err := wrote.g.Start(ctx, "t", agent.NewState("t", "U_ALICE", "C1", "turn 0"), graph.RunConfig{}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 20; i++ {
		if _, err := wrote.g.Continue(ctx, "t", agent.UserTurn("U_ALICE", fmt.Sprintf("turn %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	other := newFixture(t, store, chat, true)
	read := mustState(t, other.g, "t")
	first := &read.State.Messages[0]
	_ = append(read.State.Messages, llm.Message{Role: llm.RoleUser, Content: "the caller's own"})
	res, err := other.g.Continue(ctx, "t", agent.UserTurn("U_ALICE", "turn 21"))
	if err != nil {
		t.Fatal(err)
	}
	if &res.State.Messages[0] != first {
		t.Error("the turn copied the conversation the read had decoded")
	}
	for _, res := range []*graph.Result[agent.State]{res, mustState(t, wrote.g, "t")} {
		msgs := res.State.Messages
		if len(msgs) != 2*22 {
			t.Fatalf("the conversation has %d messages, want %d", len(msgs), 2*22)
		}
		if got := msgs[42].Content; got != "turn 21" {
			t.Errorf("the turn's message is %q, want %q", got, "turn 21")
		}
		if got := msgs[43].Content; got != "You said: turn 21" {
			t.Errorf("the answer is %q, want %q", got, "You said: turn 21")
		}
	}
}
