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
