// Package slackuitest reads text the way Slack does, for tests: it finds
// what Slack would make live of a text in each of its formats — links
// whose label is not their target, mentions, broadcasts, and the controls
// that reorder how a link is shown.
//
// The readers are conservative: where Slack's exact reading is unknown,
// they report what might be live. A zero-width space is a character like
// any other to them, as it is to CommonMark.
package slackuitest

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Finding is a piece of a text that Slack would make live.
type Finding struct {
	// Kind is "link" (a link whose label differs from its target),
	// "reference" (a reference link or a link definition), "mention"
	// (<@U…>, <#C…>, <!subteam^…>, <!here>, …), "broadcast" (@here,
	// @channel, @everyone), "markup" (an autolink, HTML) or "reordering"
	// (a control that changes the order text is shown in).
	Kind string
	// Text is the piece, At its byte offset.
	Text string
	At   int
}

// Mrkdwn finds what Slack's mrkdwn would make live of s: the <…> markup —
// <url|label> with a label other than the URL, <@…>, <#…>, <!…> — and
// reordering controls. mrkdwn has no other link syntax: "[a](b)" is
// shown as written.
func Mrkdwn(s string) []Finding {
	var found []Finding
	for i := 0; i < len(s); i++ {
		if s[i] != '<' {
			continue
		}
		j := strings.IndexByte(s[i+1:], '>')
		if j < 0 {
			break
		}
		inner := s[i+1 : i+1+j]
		piece := s[i : i+j+2]
		switch {
		case strings.HasPrefix(inner, "@") || strings.HasPrefix(inner, "#") || strings.HasPrefix(inner, "!"):
			found = append(found, Finding{"mention", piece, i})
		case strings.Contains(inner, "|"):
			if target, label, _ := strings.Cut(inner, "|"); label != target {
				found = append(found, Finding{"link", piece, i})
			}
		}
	}
	return append(found, reorderings(s)...)
}

// Markdown finds what Slack's Markdown (CommonMark with GitHub's
// extensions, and Slack's own <…> markup) would make live of s:
// [label](target) and ![alt](src) whose label is not their target,
// reference links ("][") and definitions ("]:"), autolinks, HTML and
// Slack markup (a "<" before a letter, "/", "!", "?", "@" or "#"),
// @here, @channel and @everyone, and reordering controls. Code blocks
// are not read for links, but only those it is sure of: opened by a fence
// at the start of a line, before any fence after spaces or a list marker
// (which might belong to a list item and end with it); from such a
// fence on, everything is read as text.
func Markdown(s string) []Finding {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
	var found []Finding
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '<' && strings.ContainsRune("/!?@#", rune(s[i+1])) || s[i] == '<' && isLetter(s[i+1]) {
			found = append(found, Finding{"markup", clip(s[i:]), i})
		}
	}
	var fence byte
	fenceLen := 0
	para, paraAt := strings.Builder{}, 0 // the text outside code blocks since the last one
	flush := func() {
		found = append(found, markdownLinks(para.String(), paraAt)...)
		para.Reset()
	}
	at := 0
	unsure := false
	for _, line := range strings.SplitAfter(s, "\n") {
		body := strings.TrimSuffix(line, "\n")
		spaces := len(body) - len(strings.TrimLeft(body, " "))
		c, n := leadRun(body[spaces:])
		rest := body[spaces+n:]
		switch {
		case fence != 0:
			if spaces <= 3 && c == fence && n >= fenceLen && strings.Trim(rest, " \t") == "" {
				fence, fenceLen = 0, 0
				paraAt = at + len(line)
			}
		case !unsure && listFence(body):
			unsure = true
			fallthrough
		case unsure:
			if para.Len() == 0 {
				paraAt = at
			}
			para.WriteString(line)
		case spaces == 0 && n >= 3 && (c == '~' || !strings.Contains(rest, "`")):
			para.WriteString(line) // the info string, read conservatively
			flush()
			fence, fenceLen = c, n
		default:
			if para.Len() == 0 {
				paraAt = at
			}
			para.WriteString(line)
		}
		at += len(line)
	}
	flush()
	return append(found, reorderings(s)...)
}

// PlainText finds what could change how a plain_text object is shown:
// Slack makes no link or mention of plain text, so only reordering
// controls, control characters other than newline and tab, and invalid
// UTF-8.
func PlainText(s string) []Finding {
	found := reorderings(s)
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD") {
			found = append(found, Finding{"invalid", s[i : i+1], i})
		} else if r != '\n' && r != '\t' && unicode.IsControl(r) {
			found = append(found, Finding{"control", string(r), i})
		}
	}
	return found
}

// markdownLinks finds the links, references and broadcasts of text
// outside code blocks; at is its offset in the whole text.
func markdownLinks(p string, at int) []Finding {
	var found []Finding
	for i := 0; i+1 < len(p); i++ {
		if p[i] != ']' {
			continue
		}
		switch p[i+1] {
		case '(':
			start := openingBracket(p[:i])
			if start < 0 {
				continue
			}
			label := p[start+1 : i]
			target := linkTarget(p[i+2:])
			if label != target {
				found = append(found, Finding{"link", clip(p[start:]), at + start})
			}
		case '[', ':':
			found = append(found, Finding{"reference", clip(p[max(0, i-20):]), at + i})
		}
	}
	for _, word := range []string{"@here", "@channel", "@everyone"} {
		for i := 0; ; {
			j := strings.Index(p[i:], word)
			if j < 0 {
				break
			}
			j += i
			r, _ := utf8.DecodeLastRuneInString(p[:j])
			if j == 0 || !(r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
				found = append(found, Finding{"broadcast", word, at + j})
			}
			i = j + 1
		}
	}
	return found
}

// openingBracket is the index of the "[" that a "]" at the end of p
// closes, or -1.
func openingBracket(p string) int {
	depth := 0
	for i := len(p) - 1; i >= 0; i-- {
		switch p[i] {
		case ']':
			depth++
		case '[':
			if depth == 0 {
				return i
			}
			depth--
		}
	}
	return -1
}

// linkTarget is the destination of an inline link, from the text after
// its "(": up to the matching ")" (or the end), without <…> or a title.
func linkTarget(p string) string {
	depth := 0
	end := len(p)
	for i := 0; i < len(p); i++ {
		if p[i] == '(' {
			depth++
		} else if p[i] == ')' {
			if depth == 0 {
				end = i
				break
			}
			depth--
		}
	}
	t := strings.TrimSpace(p[:end])
	if strings.HasPrefix(t, "<") {
		if k := strings.IndexByte(t, '>'); k > 0 {
			return t[1:k]
		}
	}
	if k := strings.IndexAny(t, " \t\n"); k >= 0 {
		t = t[:k]
	}
	return t
}

// leadRun is the fence character a line starts with and how many.
func leadRun(line string) (byte, int) {
	if line == "" || (line[0] != '`' && line[0] != '~') {
		return 0, 0
	}
	n := 1
	for n < len(line) && line[n] == line[0] {
		n++
	}
	return line[0], n
}

// listFence reports whether a line has three or more backticks or tildes
// after nothing but spaces, tabs and list markers, other than at its
// start: a fence that may belong to a list item.
func listFence(line string) bool {
	i := 0
	for i < len(line) && strings.IndexByte(" \t-*+.)0123456789", line[i]) >= 0 {
		i++
	}
	if i == 0 {
		return false
	}
	_, n := leadRun(line[i:])
	return n >= 3
}

func reorderings(s string) []Finding {
	var found []Finding
	for i, r := range s {
		if (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069') {
			found = append(found, Finding{"reordering", string(r), i})
		}
	}
	return found
}

func isLetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }

func clip(s string) string {
	if len(s) > 60 {
		return s[:60]
	}
	return s
}

func (f Finding) String() string { return f.Kind + " " + strconv.Quote(f.Text) }
