package interrupt_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/countersign/countersign/interrupt"
)

func TestExtract(t *testing.T) {
	info := interrupt.Info{Reason: "approval", Payload: json.RawMessage(`[1]`)}
	tests := []struct {
		name       string
		err        error
		wantOK     bool
		wantReason string
	}{
		{"typed", interrupt.New(info), true, "approval"},
		{"wrapped typed", fmt.Errorf("node tools: %w", interrupt.New(info)), true, "approval"},
		{"rerun", interrupt.InterruptAndRerun(), true, "rerun"},
		{"wrapped rerun", fmt.Errorf("x: %w", interrupt.ErrInterruptAndRerun), true, "rerun"},
		{"other", errors.New("boom"), false, ""},
		{"nil", nil, false, ""},
	}
	for _, tt := range tests {
		got, ok := interrupt.Extract(tt.err)
		if ok != tt.wantOK || (ok && got.Reason != tt.wantReason) {
			t.Errorf("Extract(%s) = %+v, %v; want reason %q, %v", tt.name, got, ok, tt.wantReason, tt.wantOK)
		}
	}
}

func TestDecisionJSONIsStable(t *testing.T) {
	for _, k := range []interrupt.Kind{interrupt.Approve, interrupt.Edit, interrupt.Reject, interrupt.Respond, interrupt.MarkDone, interrupt.Expire} {
		d := interrupt.Decision{Kind: k, By: "U1", Args: json.RawMessage(`{"a":1}`), Reason: "r"}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("Marshal(%s) = %v", k, err)
		}
		var back interrupt.Decision
		if err := json.Unmarshal(b, &back); err != nil || back.Kind != k {
			t.Errorf("round trip of %s = %+v, %v", b, back, err)
		}
		if err := d.Validate(); err != nil {
			t.Errorf("Validate(%s) = %v", k, err)
		}
	}
	if b, _ := json.Marshal(interrupt.Decision{Kind: interrupt.MarkDone}); string(b[:20]) != `{"kind":"mark_done",` {
		t.Errorf("MarkDone encodes as %s", b)
	}
	bad := []interrupt.Decision{
		{Kind: interrupt.Edit, By: "U1", Args: json.RawMessage(`{`)},
		{Kind: interrupt.Approve},
		{Kind: 99, By: "U1"},
	}
	for _, d := range bad {
		if err := d.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", d)
		}
	}
}
