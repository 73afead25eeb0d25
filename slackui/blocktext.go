package slackui

// The Slack text toolkit: measuring and cutting mrkdwn within Block Kit's
// limits, code blocks that text cannot break out of, and mentions and
// dates. The escaping itself is package slackui's, one escaper per
// format. Cards (cards.go) and replies build on it.

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// FitCode puts text in a mrkdwn code block of at most budget characters
// of content, escaped for Slack, and cut with a final "…" line if it is
// longer. shown is how many of the text's characters the block holds.
func FitCode(text string, budget int) (code string, shown int) {
	const cut = "\n…"
	content, shown, complete := codeContent(text, budget)
	if !complete {
		content, shown, _ = codeContent(text, budget-slackLen(cut))
		content += cut
	}
	return "```\n" + content + "\n```", shown
}

// codeContent escapes as much of text as fits in limit characters, for
// the inside of a code block. A backtick next to another one gets a
// zero-width space between them, so the text can never close the fence
// early.
func codeContent(text string, limit int) (content string, shown int, complete bool) {
	var b strings.Builder
	used, prevTick := 0, false
	for _, r := range strings.ToValidUTF8(text, "\uFFFD") {
		piece := slackEscape(string(r))
		if r == '`' && prevTick {
			piece = "\u200b`"
		}
		if used+slackLen(piece) > limit {
			return b.String(), shown, false
		}
		b.WriteString(piece)
		used += slackLen(piece)
		prevTick = r == '`'
		shown++
	}
	return b.String(), shown, true
}

// codeFence is FitCode without the count.
func codeFence(text string, budget int) string {
	code, _ := FitCode(text, budget)
	return code
}

// CodeSpan shows a short name as inline code; backticks in it would end
// the span, so they are dropped.
func CodeSpan(name string) string {
	name = ClipText(slackEscape(strings.ReplaceAll(name, "`", "")), BudgetName)
	if name == "" {
		return "_unnamed_"
	}
	return "`" + name + "`"
}

// UserMention links a Slack user ID. Anything that is not one is shown as
// text, so that a name cannot smuggle in a mention of @channel.
func UserMention(id string) string {
	if id == "" {
		return "_someone_"
	}
	for _, r := range id {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return ClipText(slackEscape(id), BudgetName)
		}
	}
	if len(id) > BudgetName {
		return ClipText(id, BudgetName)
	}
	return "<@" + id + ">"
}

// Date shows a time in each reader's own time zone, with a UTC
// fallback for clients that cannot.
func Date(t time.Time) string {
	return fmt.Sprintf("<!date^%d^{date_short_pretty} at {time}|%s>", t.Unix(), t.UTC().Format("Jan 2, 2006 15:04 UTC"))
}

// UntilText says how far away a deadline is.
func UntilText(d time.Duration) string {
	d = d.Round(time.Minute)
	switch {
	case d <= 0:
		return "due now"
	case d < time.Hour:
		return fmt.Sprintf("in %d min", int(d.Minutes()))
	case d < 48*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("in %dh", h)
		}
		return fmt.Sprintf("in %dh %dm", h, m)
	}
	return fmt.Sprintf("in %d days", int(d.Hours()/24))
}

// slackEscape makes text from the model, a tool or a person show as it is
// in the bot's own mrkdwn: escaped, with invalid UTF-8 replaced, and with
// no code fence of its own (slackui.MrkdwnInline).
func slackEscape(s string) string { return MrkdwnInline(s) }

// OneLine puts text on one line.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// ClipText shortens s to at most max characters (UTF-16 code units), cutting
// between characters and never inside an escape like &amp;, and ends it
// with "…" if it was cut.
func ClipText(s string, max int) string {
	if slackLen(s) <= max {
		return s
	}
	n, end := 0, 0
	for i, r := range s {
		if n+utf16Len(r) > max-1 {
			break
		}
		n += utf16Len(r)
		end = i + utf8.RuneLen(r)
	}
	s = s[:end]
	if amp := strings.LastIndexByte(s, '&'); amp >= 0 && !strings.Contains(s[amp:], ";") {
		s = s[:amp]
	}
	return s + "…"
}

// slackLen is the length of s in UTF-16 code units.
func slackLen(s string) int {
	n := 0
	for _, r := range s {
		n += utf16Len(r)
	}
	return n
}

func utf16Len(r rune) int {
	if r >= 0x10000 {
		return 2
	}
	return 1
}

// withCommas formats n with commas: 102400 → "102,400".
func withCommas(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
