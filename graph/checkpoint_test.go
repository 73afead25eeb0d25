package graph

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/countersign/countersign/interrupt"
)

// pausedCheckpoint is a checkpoint of a run paused on an approval, as the
// agent's graph writes it.
const pausedCheckpoint = `{"v":2,"thread":"T0TEST:C0TEST:1700000000.000100","id":"f9061c8547e156e4","parent":"e70c034299ea2a6e","seq":3,"step":1,"status":"paused","next":["tools"],"fp":{"g":"df3d2e652a24","n":{"tools":"7bc037c6ec22"},"p":{"tool:http_request":"968a1d74ca24"},"sv":1},"interrupts":[{"id":"1:tools","path":["tools"],"reason":"approval","payload":[{"key":"0.0","id":"call_1","tool":"http_request","status":"pending","expires":"2026-11-27T09:53:57.503626873Z"}],"deadline":"2026-11-27T09:53:57.503626873Z"}],"state":{"thread":"T0TEST:C0TEST:1700000000.000100","requester":"U0ALICE","channel":"C0TEST","team":"T0TEST","calls":[{"key":"0.0","id":"call_1","tool":"http_request","args":{"method":"GET","url":"https://status.example.com/health"},"requester":"U0ALICE","status":"pending","needs_approval":true,"rule":{"self_approval":true},"since":"2026-11-26T09:53:57.503626813Z","expires":"2026-11-27T09:53:57.503626873Z"}],"turns":1,"pass_turns":1},"journal_len":2,"created":"2026-11-26T09:53:57.503776493Z","keep_until":"2026-11-27T09:53:57.503626873Z"}`

// MarshalMeta writes what json.Marshal writes, byte for byte: a store
// that saves it stores what it stored before, and reads it back the
// same — a state written by hand compacted, its arguments' bytes (which
// their hash covers) as json.Marshal leaves them.
func TestMarshalMetaIsJSON(t *testing.T) {
	var paused Checkpoint
	if err := json.Unmarshal([]byte(pausedCheckpoint), &paused); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	every := &Checkpoint{
		Version: SchemaVersion, Thread: `T<1>&"2"`, ID: "é\u2028", Parent: "p\n", Seq: -4, Step: 7, Status: Failed,
		Next: []string{"a", "b"}, Queued: []string{"c"},
		Writes:      []Write{{Node: "a", Done: true, State: json.RawMessage(`{"x":1}`), Journal: []json.RawMessage{json.RawMessage(`"m"`)}}},
		Arrivals:    map[string][]string{"j": {"a"}},
		Nested:      map[string]json.RawMessage{"sub": json.RawMessage(`{"v":2}`)},
		Fingerprint: &Fingerprint{Graph: "g", Nodes: map[string]string{"b": "2", "a": "1"}},
		Interrupts: []interrupt.Info{
			{ID: "7:a", Path: []string{"a", "inner"}, Reason: "before:a"},
			{ID: "7:b", Reason: "approval", Payload: json.RawMessage(`[1,2]`), Deadline: at.In(time.FixedZone("x", 3600))},
		},
		Error: "node a: <boom> & \"bust\"", Final: true,
		Config:     RunConfig{InterruptBefore: []string{}, InterruptAfter: []string{"b"}},
		SkipBefore: []string{"a"},
		State:      json.RawMessage(`{"n":[1,2,{"k":null}]}`),
		JournalLen: 3, JournalFrom: 1, Journal: []json.RawMessage{json.RawMessage(`{}`)},
		Created: at, KeepUntil: at.Add(time.Hour),
	}
	bare := &Checkpoint{Status: Running, Fingerprint: &Fingerprint{}}
	byHand := &Checkpoint{Status: Paused, State: json.RawMessage("{\n  \"args\": {\"url\": \"https://x/?a=1&b=<2>\"},\n  \"s\": \"a b\\\" \u2028\"\n}"),
		Interrupts: []interrupt.Info{{ID: "1:a", Payload: json.RawMessage(` [ "\\" , "→" ] `)}}}
	for name, cp := range map[string]*Checkpoint{"paused": &paused, "every field": every, "bare": bare, "by hand": byHand} {
		want, err := json.Marshal(cp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cp.MarshalMeta()
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: MarshalMeta() =\n%s, %v\nwant\n%s", name, got, err, want)
		}
	}
}

// What json.Marshal refuses, MarshalMeta refuses too: a state or a
// payload that is not JSON, a status without a name, a time RFC 3339
// cannot write.
func TestMarshalMetaRefusesWhatJSONRefuses(t *testing.T) {
	for name, cp := range map[string]*Checkpoint{
		"state":    {Status: Running, State: json.RawMessage(`{"x":`)},
		"payload":  {Status: Paused, State: json.RawMessage(`{}`), Interrupts: []interrupt.Info{{ID: "1:a", Payload: json.RawMessage(`[}`)}}},
		"status":   {Status: Status(9), State: json.RawMessage(`{}`)},
		"created":  {Status: Running, State: json.RawMessage(`{}`), Created: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"deadline": {Status: Paused, State: json.RawMessage(`{}`), Interrupts: []interrupt.Info{{ID: "1:a", Deadline: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}}},
	} {
		if _, err := json.Marshal(cp); err == nil {
			t.Fatalf("%s: json.Marshal accepted it", name)
		}
		if got, err := cp.MarshalMeta(); err == nil {
			t.Errorf("%s: MarshalMeta() = %s, want an error", name, got)
		}
	}
}

// FuzzMarshalMeta: whatever a checkpoint's strings, state and payload
// hold, MarshalMeta fails where json.Marshal fails, and otherwise writes
// what json.Marshal writes.
func FuzzMarshalMeta(f *testing.F) {
	f.Add("T1:C1:1.2", "a1", "tools", "", []byte(`{"calls":[]}`), []byte(`[{"key":"0.0"}]`))
	f.Add(`<&>`, "\u2028", "\xff", "x\"y", []byte(` { "a" : "<b>" } `), []byte(``))
	f.Add("", "", "", "", []byte(`nul`), []byte(`{`))
	f.Add("0", "0", "0", "", []byte{}, []byte(`0`)) // an empty state is no JSON; a nil one is null
	f.Fuzz(func(t *testing.T, thread, id, node, msg string, state, payload []byte) {
		cp := &Checkpoint{
			Version: SchemaVersion, Thread: thread, ID: id, Parent: id + node, Seq: 2, Status: Paused,
			Next: []string{node}, Fingerprint: &Fingerprint{Graph: id, Nodes: map[string]string{node: id, thread: msg}},
			Interrupts: []interrupt.Info{{ID: id, Path: []string{node}, Reason: msg, Payload: payload}},
			Error:      msg, State: state, Created: time.Unix(1700000000, 0).UTC(),
		}
		want, wantErr := json.Marshal(cp)
		got, err := cp.MarshalMeta()
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("MarshalMeta() = %q, %v; json.Marshal: %q, %v", got, err, want, wantErr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("MarshalMeta() = %q, json.Marshal: %q", got, want)
		}
	})
}
