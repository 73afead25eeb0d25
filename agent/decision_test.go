package agent_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
)

func TestDecisionJSONIsStable(t *testing.T) {
	for _, k := range []agent.Kind{agent.Approve, agent.Edit, agent.Reject, agent.Respond, agent.MarkDone, agent.Expire} {
		d := agent.Decision{Kind: k, By: "U1", Args: json.RawMessage(`{"a":1}`), Reason: "r"}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("Marshal(%s) = %v", k, err)
		}
		var back agent.Decision
		if err := json.Unmarshal(b, &back); err != nil || back.Kind != k {
			t.Errorf("round trip of %s = %+v, %v", b, back, err)
		}
		if err := d.Validate(); err != nil {
			t.Errorf("Validate(%s) = %v", k, err)
		}
	}
	if b, _ := json.Marshal(agent.Decision{Kind: agent.MarkDone}); string(b[:20]) != `{"kind":"mark_done",` {
		t.Errorf("MarkDone encodes as %s", b)
	}
	bad := []agent.Decision{
		{Kind: agent.Edit, By: "U1", Args: json.RawMessage(`{`)},
		{Kind: agent.Approve},
		{Kind: 99, By: "U1"},
	}
	for _, d := range bad {
		if err := d.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", d)
		}
	}
}

// FuzzDecisionJSON: a decision's stored form (a claim) is written as
// json.Marshal writes it and read as json.Unmarshal reads it, whoever
// wrote it.
func FuzzDecisionJSON(f *testing.F) {
	f.Add([]byte(`{"kind":"approve","by":"U1","at":"2026-11-26T09:53:57.503626813Z","hash":"ab"}`), 1, "U1", "r", "h", int64(1764150837503626813), []byte(`{"a":1}`))
	f.Add([]byte(`{"kind":"edit","by":"U\u00e9","at":"2026-11-26T09:53:57Z","args":{"a":[1, 2]},"reason":"<r>","approvals":[{"by":"U2","at":"2026-11-26T09:53:57Z"}]}`), 2, "", "", "", int64(0), []byte(nil))
	f.Add([]byte(`{"kind":"answer","by":"U1","at":"0001-01-01T00:00:00Z","answers":{"k":{"action":"accept"}}}`), 7, "U\n", "\u2028", "", int64(-1), []byte(`{ "a" : 1 }`))
	f.Add([]byte(`{"kind":"approve","Kind":"reject"}`), 99, "x", "", "", int64(0), []byte(`[1]`))
	f.Fuzz(func(t *testing.T, raw []byte, kind int, by, reason, hash string, at int64, args []byte) {
		var want agent.Decision
		werr := json.Unmarshal(raw, &want)
		var got agent.Decision
		gerr := got.DecodeJSON(raw)
		if (gerr == nil) != (werr == nil) || gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeJSON(%s) = %+v, %v; json.Unmarshal: %+v, %v", raw, got, gerr, want, werr)
		}

		d := agent.Decision{Kind: agent.Kind(kind), By: by, At: time.Unix(0, at).UTC(), Args: args, Reason: reason, Hash: hash}
		if at%2 == 0 {
			d.Approvals = []agent.Approval{{By: reason, At: d.At}, {By: by}}
		}
		marshalled, merr := json.Marshal(d)
		b, err := d.AppendJSON(nil)
		if (err == nil) != (merr == nil) || err == nil && string(b) != string(marshalled) {
			t.Fatalf("AppendJSON(%+v) = %s, %v; json.Marshal: %s, %v", d, b, err, marshalled, merr)
		}
	})
}
