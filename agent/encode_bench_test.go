package agent_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/tools"
)

// pausedState is the state a turn-1 cycle saves most: one call waiting
// for approval.
func pausedState() agent.State {
	at := time.Date(2026, 11, 26, 17, 4, 5, 123456789, time.UTC)
	args := json.RawMessage(`{"method":"GET","url":"https://status.example.com/health"}`)
	return agent.State{Thread: "C0123456789:1764176645.000100", Requester: "U0ALICE", Channel: "C0123456789", Team: "T01",
		TurnBy: "U0ALICE", Turns: 1, PassTurns: 1, Calls: []agent.Call{{
			Key: "0.0", ID: "call_1", Tool: "http_request", Args: args, Hash: tools.ArgsHash("http_request", args),
			Requester: "U0ALICE", Status: agent.Pending, NeedsApproval: true, Rule: &agent.CallRule{},
			Since: at, Expires: at.Add(24 * time.Hour),
		}}}
}

// BenchmarkStateJSON compares the state's own encoding and decoding
// with encoding/json's, on a paused turn-1 state.
func BenchmarkStateJSON(b *testing.B) {
	s := pausedState()
	data, err := s.AppendJSON(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode/AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.AppendJSON(make([]byte, 0, 512)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode/json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/DecodeJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got agent.State
			if err := got.DecodeJSON(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got agent.State
			if err := json.Unmarshal(data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkUnmarshalJournal decodes a 100-turn conversation as it is
// stored (400 messages: the person's, the model's call, the tool's
// result, the answer): what a replica pays to take up a thread it has
// not seen.
func BenchmarkUnmarshalJournal(b *testing.B) {
	var entries []json.RawMessage
	for turn := range 100 {
		for _, m := range []llm.Message{
			{Role: llm.RoleUser, Content: fmt.Sprintf("Is the status service healthy? (turn %d)\nIt was slow this morning.", turn)},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: fmt.Sprintf("call_%d", turn), Name: "http_request",
				Arguments: `{"method":"GET","url":"https://status.example.com/health"}`}}},
			{Role: llm.RoleTool, ToolCallID: fmt.Sprintf("call_%d", turn), Name: "http_request",
				Content: `HTTP 200 OK` + "\n" + `{"status":"healthy","checks":{"db":"ok","queue":"ok"}}`},
			{Role: llm.RoleAssistant, Content: "The status service is healthy (GET /health → 200).\n\n- db: ok\n- queue: ok"},
		} {
			e, err := json.Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			entries = append(entries, e)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		var s agent.State
		if err := s.UnmarshalJournal(entries); err != nil {
			b.Fatal(err)
		}
	}
}
