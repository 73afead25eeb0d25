package slackui_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/slackui"
)

func TestReminderText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tool   string
		people []string
		waited time.Duration
		want   string
	}{
		{"http_request", nil, 90 * time.Minute, "Reminder: http_request has waited 1h30m for approval"},
		{"http_request", []string{"W0DAVE"}, 2 * time.Second, "Reminder: <@W0DAVE> — http_request has waited 2s for approval"},
		{"<!here>", []string{"<!channel>", "S0OPS"}, 24 * time.Hour, "Reminder: &lt;!channel&gt;, <!subteam^S0OPS> — &lt;!here&gt; has waited 1d for approval"},
	}
	for _, tt := range tests {
		if got := slackui.ReminderText(tt.tool, tt.people, tt.waited); got != tt.want {
			t.Errorf("ReminderText(%q, %q, %v) = %q, want %q", tt.tool, tt.people, tt.waited, got, tt.want)
		}
	}
}

// mentionMarkup is the markup reminders may hold: user and group mentions.
var mentionMarkup = regexp.MustCompile(`<@[A-Z0-9]+>|<!subteam\^S[A-Z0-9]+>`)

// Whatever the tool's name and the policy's IDs, a reminder mentions only
// users and groups, never @here or a link, and stays short.
func FuzzReachText(f *testing.F) {
	f.Add("http_request", "U0BOB", "S0OPS", int64(time.Hour))
	f.Add("<!here>", "<!channel>", "S0<@U1>", int64(-1))
	f.Add("``` <https://x|y>", "U0BOB>", "", int64(0))
	f.Fuzz(func(t *testing.T, tool, a, b string, waited int64) {
		for _, text := range []string{
			slackui.ReminderText(tool, []string{a, b}, time.Duration(waited)),
			slackui.EscalationText(tool, []string{a, b}, time.Duration(waited)),
		} {
			if !utf8.ValidString(text) || utf8.RuneCountInString(text) > 1000 {
				t.Errorf("text %q: invalid or too long", text)
			}
			if rest := mentionMarkup.ReplaceAllString(text, ""); strings.ContainsAny(rest, "<>") {
				t.Errorf("text %q: live markup beyond mentions", text)
			}
		}
	})
}
