package slackui

import (
	"fmt"
	"strconv"
	"strings"
)

// ProgressLine says how far a call got: "⏳ Progress: 3 of 8 (38%) —
// message", or without what is not known.
func ProgressLine(progress, total float64, message string) string {
	num := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	line := "⏳ Progress: " + num(progress)
	if total > 0 {
		line += " of " + num(total) + fmt.Sprintf(" (%d%%)", int(min(max(progress/total, 0), 1)*100))
	}
	if message = strings.TrimSpace(message); message != "" {
		line += " — " + ClipText(slackEscape(OneLine(message)), 200)
	}
	return line
}
