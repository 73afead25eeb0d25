package agent_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/agent"
)

// checkDecodeState checks that State.DecodeJSON decodes what
// json.Unmarshal decodes from data into a zero state, and fails where it
// fails.
func checkDecodeState(t *testing.T, data []byte) {
	t.Helper()
	var want agent.State
	wantErr := json.Unmarshal(data, &want)
	got := agent.State{Thread: "left over", Calls: []agent.Call{{Key: "left over"}}}
	err := got.DecodeJSON(data)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("DecodeJSON(%q) = %v; json.Unmarshal: %v", data, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeJSON(%q) =\n%+v\njson.Unmarshal:\n%+v", data, got, want)
	}
}

// stateTexts are states' JSON as AppendJSON writes it, and as other
// writers could have: with white space, escapes, keys in other cases or
// twice, null, numbers that are no integers, and what is not JSON.
func stateTexts() [][]byte {
	var out [][]byte
	for _, tt := range sampleStates() {
		if b, err := tt.state.AppendJSON(nil); err == nil {
			out = append(out, b)
		}
	}
	turn1 := `{"thread":"C1:1.2","requester":"U_ALICE","calls":[{"key":"0.0","id":"call_0","tool":"http_request",` +
		`"args":{"method":"GET","url":"https://x"},"requester":"U_ALICE","status":"pending","needs_approval":true,` +
		`"rule":{"approvers":["U_BOB"]},"since":"2026-11-26T17:04:05.123Z","expires":"2026-11-27T17:04:05+01:30",` +
		`"decision":{"kind":"approve","by":"U_BOB","at":"2026-11-26T17:04:05Z","hash":"h","approvals":[{"by":"U_C","at":"2026-11-26T17:04:05Z"}]}}],"turns":1,"pass_turns":1}`
	out = append(out, []byte(turn1))
	for _, edit := range [][2]string{
		{`,`, " ,\n\t"},
		{`:`, ` : `},
		{`"key"`, `"Key"`},
		{`"pass_turns":1`, `"pass_turns":1,"pass_turns":2`},
		{`"turns":1`, `"turns":1.0`},
		{`"turns":1`, `"turns":1e2`},
		{`"turns":1`, `"turns":-0`},
		{`"turns":1`, `"turns":01`},
		{`"turns":1`, `"turns":99999999999999999999`},
		{`"turns":1`, `"turns":-123456789012345678`},
		{`"turns":1`, `"turns":null`},
		{`"rule":{"approvers":["U_BOB"]}`, `"rule":null`},
		{`"rule":{"approvers":["U_BOB"]}`, `"rule":{"approvers":[]}`},
		{`"rule":{"approvers":["U_BOB"]}`, `"rule":{"approvers":null}`},
		{`"U_ALICE"`, `"U_\u0041LICE\n\"\\/\ud83d\ude00"`},
		{`"U_ALICE"`, "\"U_\xffALICE\""},
		{`"U_ALICE"`, "\"U_\x01\""},
		{`"U_ALICE"`, `"U_\x"`},
		{`"pending"`, `"pend\u0069ng"`},
		{`"pending"`, `"waiting"`},
		{`"approve"`, `"reject"`},
		{`2026-11-26T17:04:05.123Z`, `2026-11-26 17:04:05Z`},
		{`{"method":"GET","url":"https://x"}`, `{ "method" : "GET" }`},
		{`{"method":"GET","url":"https://x"}`, `{"method":"GET",}`},
		{`{"method":"GET","url":"https://x"}`, `"GET"`},
		{`{"method":"GET","url":"https://x"}`, `{"a":"}\"{["}`},
		{`"needs_approval":true`, `"needs_approval":false`},
		{`"needs_approval":true`, `"needs_approval":"true"`},
		{`"calls":[`, `"notes":[{"by":"U_E","text":"hi"}],"calls":[`},
		{`"hash":"h",`, `"hash":"h","answers":{"a":{"action":"accept"}},`},
		{`"pass_turns":1}`, `"pass_turns":1} `},
		{`"pass_turns":1}`, `"pass_turns":1}}`},
		{`"pass_turns":1}`, `"pass_turns":1`},
		{`"pass_turns":1}`, `"pass_turns":1,"cancelled":{"by":"U_B","message":3}}`},
	} {
		out = append(out, []byte(strings.Replace(turn1, edit[0], edit[1], 1)))
	}
	return append(out, []byte(`null`), []byte(``), []byte(`{}`), []byte(`[]`), []byte(`{"calls":[]}`), []byte(`{"calls":[{}]}`))
}

// TestDecodeStateIsJSON: DecodeJSON decodes what json.Unmarshal does,
// from the form AppendJSON writes and from any other.
func TestDecodeStateIsJSON(t *testing.T) {
	for _, data := range stateTexts() {
		checkDecodeState(t, data)
	}
}

// FuzzDecodeState: whatever a stored state holds, DecodeJSON decodes
// what json.Unmarshal does, or fails where it fails.
func FuzzDecodeState(f *testing.F) {
	for _, data := range stateTexts() {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeState(t, data)
	})
}

// TestArgsReadBackAsMade: a checkpoint holds a call's arguments with <, >
// and & escaped, as json.Marshal writes them; read back, by DecodeJSON or
// by json.Unmarshal, they are as the call was made, so that its card, its
// Edit form and its decision show "?a=1&b=2" and not "?a=1\u0026b=2".
func TestArgsReadBackAsMade(t *testing.T) {
	args := json.RawMessage(`{"url":"https://example.com/?a=1&b=2","q":"<b>"}`)
	edited := json.RawMessage(`{"url":"https://example.com/?a=1&b=3","q":"\\u0026"}`)
	s := agent.State{Calls: []agent.Call{{
		Key: "0.0", Tool: "http_request", Args: args, EditedArgs: edited, Status: agent.Approved, NeedsApproval: true,
		Decision: &agent.Decision{Kind: agent.Edit, By: "U_BOB", Args: edited},
	}}}
	stored, err := s.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(stored), `\u0026`) {
		t.Fatalf("stored form %s: want & escaped, as json.Marshal writes it", stored)
	}
	var fast, slow agent.State
	if err := fast.DecodeJSON(stored); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(stored, &slow); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]agent.State{"DecodeJSON": fast, "json.Unmarshal": slow} {
		c := got.Calls[0]
		if string(c.Args) != string(args) || string(c.EditedArgs) != string(edited) || string(c.Decision.Args) != string(edited) {
			t.Errorf("%s: args %s, edited %s, decision %s; want %s and %s", name, c.Args, c.EditedArgs, c.Decision.Args, args, edited)
		}
	}
}
