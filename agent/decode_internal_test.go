package agent

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/jsonform"
	"github.com/countersign/countersign/tools"
)

// The states the engine saves at a cycle's steps are read by the reader
// itself, not handed to encoding/json: it is the point of having one.
func TestStateReaderReadsWhatAppendJSONWrites(t *testing.T) {
	at := time.Date(2026, 11, 26, 17, 4, 5, 0, time.UTC)
	args := json.RawMessage(`{"method":"GET","url":"https://example.com/"}`)
	call := Call{
		Key: "0.0", ID: "call_0", Tool: "http_request", Args: args, Hash: tools.ArgsHash("http_request", args),
		Requester: "U_ALICE", Reason: "Checking \"it\"\n", Status: Pending, NeedsApproval: true,
		Rule: &CallRule{Approvers: []string{"U_BOB"}}, Since: at, Expires: at.Add(time.Hour),
	}
	approved := call
	approved.Status, approved.Attempts = Running, 1
	approved.Decision = &Decision{Kind: Approve, By: "U_BOB", At: at, Hash: call.Hash, Approvals: []Approval{{By: "U_BOB", At: at}}}
	done := approved
	done.Status, done.Result, done.EditedArgs = Done, "200 OK\n{\"status\":\"healthy\"}", json.RawMessage(`{"n":1}`)
	for _, s := range []State{
		{Thread: "C1:1.2", Requester: "U_ALICE", Channel: "C1", Team: "T1", TurnBy: "U_ALICE", Turns: 1, PassTurns: 1},
		{Thread: "C1:1.2", Requester: "U_ALICE", Calls: []Call{call}, Turns: 1, PassTurns: 1},
		{Thread: "C1:1.2", Requester: "U_ALICE", Calls: []Call{approved, done}, Turns: 1, PassTurns: 1},
	} {
		b, err := s.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		d := stateReader{jsonform.NewReader(b)}
		if !d.state(new(State)) {
			t.Errorf("the reader gave up on %s at byte %d", b, d.Offset())
		}
	}
}

// The payload of a pause for approval is json.Marshal's of the waiting
// calls in brief.
func TestBriefCallsIsJSON(t *testing.T) {
	at := time.Date(2026, 11, 26, 17, 4, 5, 0, time.UTC)
	waiting := []Call{
		{Key: "0.0", ID: "call_0", Tool: "http_request", Status: Pending, Expires: at, Args: json.RawMessage(`{}`), Reason: "x"},
		{Key: "0.1", ID: "<id>", Tool: "deploy", Status: Asking},
	}
	brief := make([]Call, len(waiting))
	for i, c := range waiting {
		brief[i] = Call{Key: c.Key, ID: c.ID, Tool: c.Tool, Status: c.Status, Expires: c.Expires}
	}
	want, err := json.Marshal(brief)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := briefCalls(waiting); err != nil || string(got) != string(want) {
		t.Errorf("briefCalls() = %s, %v; want %s", got, err, want)
	}
}
