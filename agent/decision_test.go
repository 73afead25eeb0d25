package agent_test

import (
	"encoding/json"
	"testing"

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
