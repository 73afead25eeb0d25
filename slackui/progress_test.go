package slackui_test

import (
	"math"
	"testing"

	"github.com/countersign/countersign/slackui"
)

// A server's numbers are shown short, whatever they are, so that its
// words still fit on the line.
func TestProgressLineNumbers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		progress, total float64
		want            string
	}{
		{3, 8, "⏳ Progress: 3 of 8 (37%) — m"},
		{0.5, 0, "⏳ Progress: 0.5 — m"},
		{1.0 / 3, 1, "⏳ Progress: 0.3333 of 1 (33%) — m"},
		{1e300, 3e300, "⏳ Progress: 1e+300 of 3e+300 (33%) — m"},
		{123456789012345678, 0, "⏳ Progress: 1.235e+17 — m"},
		{math.Inf(1), math.Inf(1), "⏳ Progress: +Inf of +Inf (0%) — m"},
		{-5, 10, "⏳ Progress: -5 of 10 (0%) — m"},
	} {
		if got := slackui.ProgressLine(tt.progress, tt.total, "m"); got != tt.want {
			t.Errorf("ProgressLine(%v, %v) = %q, want %q", tt.progress, tt.total, got, tt.want)
		}
	}
}
