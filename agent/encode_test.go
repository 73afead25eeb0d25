package agent_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/tools"
)

// plainCall is Call without its methods: what Call.MarshalJSON wrote
// when it handed the call to json.Marshal.
type plainCall agent.Call

// referenceCall is the call's JSON as encoding/json writes it, with Hash
// left out when it is the hash of the tool and Args.
func referenceCall(c agent.Call) ([]byte, error) {
	p := plainCall(c)
	if p.Hash != "" && len(p.Args) > 0 && p.Hash == tools.ArgsHash(p.Tool, p.Args) {
		p.Hash = ""
	}
	return json.Marshal(p)
}

// checkStateJSON checks that State.AppendJSON writes what json.Marshal
// writes for s, and each call's MarshalJSON what encoding/json writes
// for the plain call, failing where they fail.
func checkStateJSON(t *testing.T, name string, s agent.State) {
	t.Helper()
	for _, c := range s.Calls {
		want, wantErr := referenceCall(c)
		got, err := c.MarshalJSON()
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Errorf("%s: Call.MarshalJSON() =\n%s, %v\nencoding/json:\n%s, %v", name, got, err, want, wantErr)
		}
	}
	want, wantErr := json.Marshal(&s)
	got, err := s.AppendJSON(nil)
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Errorf("%s: AppendJSON() =\n%s, %v\njson.Marshal:\n%s, %v", name, got, err, want, wantErr)
	}
	// What it appends to is kept.
	if err == nil {
		if got, _ := s.AppendJSON([]byte("x")); !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Errorf("%s: AppendJSON(x) = %s, want x%s", name, got, want)
		}
	}
}

// TestStateJSONIsJSON: the state's JSON is json.Marshal's, byte for
// byte, whatever fields are set, and fails where json.Marshal fails.
func TestStateJSONIsJSON(t *testing.T) {
	for _, tt := range sampleStates() {
		checkStateJSON(t, tt.name, tt.state)
	}
}

type sampleState struct {
	name  string
	state agent.State
}

// sampleStates are states with every field set, or none, and values
// that JSON escapes or refuses.
func sampleStates() []sampleState {
	at := time.Date(2026, 11, 26, 17, 4, 5, 123456789, time.UTC)
	args := json.RawMessage(`{"method":"GET","url":"https://example.com/?a=1&b=<2>"}`)
	canonical := json.RawMessage(`{"n":1}`)
	full := agent.Call{
		Key: "3.0", ID: "call_3_0", Tool: "deploy", Args: canonical, EditedArgs: json.RawMessage(`{"n":2}`),
		Hash: tools.ArgsHash("deploy", canonical), Requester: "U_ALICE", Reason: "Deploying \"now\"\n<b>&\u2028\xff",
		Status: agent.Done, NeedsApproval: true,
		Rule:  &agent.CallRule{Approvers: []string{"U_BOB", "S_OPS"}, SelfApproval: true},
		Since: at, Expires: at.Add(time.Hour),
		Decision: &agent.Decision{
			Kind: agent.Approve, By: "U_BOB", At: at, Args: json.RawMessage(`{"n":2}`), Reason: "ok", Hash: "abc",
			Approvals: []agent.Approval{{By: "U_CAROL", At: at}, {By: "U_BOB", At: at.Add(time.Minute)}},
			Answers:   map[string]tools.ElicitAnswer{"b": {Action: "accept", Content: map[string]any{"x": 1}}, "a": {Action: "decline"}},
		},
		Result: "200 OK\n{\"status\":\"healthy\"}\t\x01", IsError: true, Attempts: 2, Unsent: 1,
		ApprovalsRequired: 2, Revision: 3, EditedBy: "U_DAN",
		Input:       &agent.CallInput{Requests: []tools.InputRequest{{Key: "k"}}, State: "s", Of: "U_ALICE"},
		ToolVersion: "v\"1",
	}
	return []sampleState{
		{"empty", agent.State{}},
		{"turn 1", agent.State{Thread: "C1:1.2", Requester: "U_ALICE", Channel: "C1", Turns: 1, PassTurns: 1, Calls: []agent.Call{{
			Key: "0.0", ID: "call_0", Tool: "http_request", Args: args, Hash: tools.ArgsHash("http_request", args),
			Requester: "U_ALICE", Status: agent.Pending, NeedsApproval: true, Rule: &agent.CallRule{},
			Since: at, Expires: at.Add(24 * time.Hour),
		}}}},
		{"every field", agent.State{
			Thread: "T<1>", Requester: "U_ALICE", Channel: "C1", Team: "T1", TurnBy: "U_BOB",
			Notes:     []agent.Note{{By: "U_EVE", Text: "hi & bye", At: at}},
			Calls:     []agent.Call{full, {Key: "3.1", Status: agent.Approved, Hash: "not the args' hash", Args: canonical}, {Key: "3.2", Status: agent.Failed, Hash: "no args"}},
			Cancelled: &agent.Cancellation{By: "U_BOB", Message: 4},
			Turns:     -3, PassTurns: 7,
		}},
		{"empty calls", agent.State{Calls: []agent.Call{}}},
		{"arguments to compact", agent.State{Calls: []agent.Call{{Key: "1", Status: agent.Pending, Args: json.RawMessage(" { \"a\" : [1, 2] } ")}}}},
		{"arguments that are no JSON", agent.State{Calls: []agent.Call{{Key: "1", Status: agent.Pending, Args: json.RawMessage(`{"a":`)}}}},
		{"unknown status", agent.State{Calls: []agent.Call{{Key: "1"}}}},
		{"unknown decision", agent.State{Calls: []agent.Call{{Key: "1", Status: agent.Done, Decision: &agent.Decision{}}}}},
		{"a time json.Marshal refuses", agent.State{Calls: []agent.Call{{Key: "1", Status: agent.Pending, Since: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}}},
		{"a zone", agent.State{Calls: []agent.Call{{Key: "1", Status: agent.Pending, Expires: at.In(time.FixedZone("X", 5400))}}}},
	}
}

// FuzzStateJSON: whatever a state's strings and a call's arguments hold,
// AppendJSON writes what json.Marshal writes, or fails where it fails.
func FuzzStateJSON(f *testing.F) {
	f.Add("C1:1.2", "U_ALICE", "http_request", "200 OK\n{}", []byte(`{"url":"https://x"}`), 1, int64(1700000000), true)
	f.Add("<&>", "\u2028\u2029", "\xff\xfe", "a\"b\\c\x00\x1f\x7f", []byte(` { "a" : "<b>" } `), 4, int64(-1), false)
	f.Add("", "", "", "", []byte(`nul`), 0, int64(0), false)
	f.Add("é", "日本", "\U0001F600", "\ufffd", []byte{}, 11, int64(253402300800), true)
	f.Fuzz(func(t *testing.T, who, text, tool, result string, args []byte, status int, unix int64, hashed bool) {
		at := time.Unix(unix, int64(status)).UTC()
		c := agent.Call{
			Key: text, ID: who, Tool: tool, Args: args, Requester: who, Reason: text, Status: agent.CallStatus(status),
			NeedsApproval: hashed, Since: at, Expires: at, Result: result, IsError: hashed, Attempts: status,
			EditedBy: who, Rule: &agent.CallRule{Approvers: []string{who, text}},
			Decision: &agent.Decision{Kind: agent.Approve, By: who, At: at, Args: args, Reason: text, Hash: result,
				Approvals: []agent.Approval{{By: text, At: at}}},
		}
		if hashed {
			c.Images = []llm.Image{{MIME: tool, Data: args}, {MIME: text}}
		}
		if hashed {
			c.Hash = tools.ArgsHash(tool, args)
		} else {
			c.Hash = result
		}
		s := agent.State{Thread: who, Requester: text, Channel: tool, Team: result, TurnBy: who, Calls: []agent.Call{c, {Key: who, Status: agent.Pending}}, Turns: status}
		checkStateJSON(t, "fuzz", s)
	})
}

// checkJournalJSON checks that MarshalJournal writes each message as
// json.Marshal does.
func checkJournalJSON(t *testing.T, msgs ...llm.Message) {
	t.Helper()
	s := agent.State{Messages: msgs}
	got, err := s.MarshalJournal(0)
	if err != nil || len(got) != len(msgs) {
		t.Fatalf("MarshalJournal() = %d entries, %v; want %d", len(got), err, len(msgs))
	}
	for i, m := range msgs {
		want, _ := json.Marshal(m) // a message always encodes
		if !bytes.Equal(got[i], want) {
			t.Errorf("MarshalJournal()[%d] =\n%s\njson.Marshal:\n%s", i, got[i], want)
		}
	}
}

// TestJournalJSONIsJSON: the journal's entries are json.Marshal's
// messages, byte for byte.
func TestJournalJSONIsJSON(t *testing.T) {
	checkJournalJSON(t,
		llm.Message{},
		llm.Message{Role: llm.RoleUser, Content: "check <https://example.com?a=1&b=2>\n\"now\" \u2028 \xff"},
		llm.Message{Role: llm.RoleAssistant, Content: "On it.", ToolCalls: []llm.ToolCall{
			{ID: "call_1", Name: "http_request", Arguments: `{"url":"https://x"}`},
			{ID: "", Name: "", Arguments: "", Truncated: true},
		}, Stop: "length", Usage: &llm.Usage{Input: 3, Output: 4}},
		llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{}},
		llm.Message{Role: llm.RoleTool, ToolCallID: "call_1", Name: "http_request", Content: "Error: 500", IsError: true},
		llm.Message{Role: llm.RoleAssistant, Content: "Checking.", ToolCalls: []llm.ToolCall{{ID: "toolu_1", Name: "http_request", Arguments: "{}"}},
			Thinking: []llm.Thinking{{Type: llm.ThinkingBlock, Text: "<plan>\n\"a\"", Signature: "EqQB+/="}, {Type: llm.RedactedThinkingBlock, Data: "EmwK/+="}, {}}},
		llm.Message{Role: llm.RoleAssistant, Thinking: []llm.Thinking{}},
	)
}

// FuzzJournalJSON: whatever a message holds, its journal entry is what
// json.Marshal writes.
func FuzzJournalJSON(f *testing.F) {
	f.Add("user", "hi", "call_1", "http_request", `{"url":"https://x"}`, "", true)
	f.Add("assistant", "<&>\u2028\u2029\xff\x00\x1f\x7f\"\\", "\t", "é", "\n", "refusal", false)
	f.Fuzz(func(t *testing.T, role, content, id, name, args, stop string, flag bool) {
		checkJournalJSON(t,
			llm.Message{Role: llm.Role(role), Content: content, ToolCallID: id, Name: name, IsError: flag, Stop: llm.Stop(stop)},
			llm.Message{Role: llm.Role(role), Content: content, ToolCalls: []llm.ToolCall{{ID: id, Name: name, Arguments: args, Truncated: flag}, {Arguments: content}}},
			llm.Message{Role: llm.Role(role), Thinking: []llm.Thinking{{Type: stop, Text: content, Signature: args}, {Type: name, Data: id}}},
			llm.Message{Role: llm.Role(role), Content: content, Images: []llm.Image{{MIME: name, Data: []byte(args)}, {MIME: stop}, {Data: []byte{}}}},
		)
	})
}
