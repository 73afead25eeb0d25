package slackui

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ProgressLine says how far a call got: "⏳ Progress: 3 of 8 (37%) —
// message" (the percentage rounded down: 100% only when done), or
// without what is not known.
func ProgressLine(progress, total float64, message string) string {
	line := "⏳ Progress: " + progressNum(progress)
	if total > 0 {
		pct := 0
		if r := progress / total; !math.IsNaN(r) {
			pct = int(min(max(r, 0), 1) * 100)
		}
		line += " of " + progressNum(total) + fmt.Sprintf(" (%d%%)", pct)
	}
	if message = strings.TrimSpace(message); message != "" {
		line += " — " + ClipText(slackEscape(OneLine(message)), 200)
	}
	return line
}

// progressNum writes a server's number short: a whole number below 10^15
// in full, any other to 4 significant digits (1e+300 rather than 301
// digits, which would push the server's words off a task's one line).
func progressNum(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', 4, 64)
}
