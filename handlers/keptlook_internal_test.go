package handlers

import (
	"testing"
	"time"

	"github.com/countersign/countersign/runner"
)

// TestKeptLookBacksOff: a kept reply's request is looked at again 2, 4
// and 8 minutes after it was first kept, and when its kept time ends,
// never later: a reply in a thread that never becomes a conversation
// costs four looks, and one whose start died waits minutes, not the
// whole kept time.
func TestKeptLookBacksOff(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	until := t0.Add(runner.KeptReplyTTL)
	now := t0
	var looks []time.Duration
	for now.Before(until) {
		next := keptLook(now, until)
		if !next.After(now) {
			t.Fatalf("at %v the next look is %v: not later", now.Sub(t0), next.Sub(t0))
		}
		now = next
		looks = append(looks, now.Sub(t0))
	}
	want := []time.Duration{2 * time.Minute, 4 * time.Minute, 8 * time.Minute, runner.KeptReplyTTL}
	if len(looks) != len(want) {
		t.Fatalf("looks at %v, want %v", looks, want)
	}
	for i := range want {
		if looks[i] != want[i] {
			t.Fatalf("looks at %v, want %v", looks, want)
		}
	}
	// A look that comes late (the intake was busy) is not pushed past the
	// kept time.
	if got := keptLook(until.Add(-time.Second), until); !got.Equal(until) {
		t.Errorf("a second before the end the next look is at %v, want the end", got.Sub(t0))
	}
}
