package agent_test

import (
	"encoding/json"
	"testing"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/llm"
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
