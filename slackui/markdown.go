package slackui

import (
	"strings"
	"unicode"
)

// Markdown as Slack reads it in markdown_text and markdown blocks is
// CommonMark with GitHub's extensions. Text from the model, a tool or a
// person could make links there that show one thing and lead to another:
// [label](target), images ![alt](src), [label][ref] and [label] with a
// definition "[ref]: target", autolinks <…> and HTML. The escaper keeps
// the text readable — what it shows is what was written — and breaks
// each of those:
//
//   - &, < and > are escaped as in mrkdwn: no autolink, HTML or Slack
//     markup (<@U…>, <!here>) can start.
//   - Every "]" is followed by a zero-width space, so that no "](", "]["
//     or "]:" is left: a bracket can no longer end a link's label or a
//     definition's name. A backslash escape would do the same in
//     CommonMark, but shows in inline code; the space shows nowhere.
//   - "@" at the start of a word is followed by a zero-width space, so
//     that "@here", "@channel" and "@everyone" cannot broadcast.
//   - Code blocks are left as they are (their text is never read for
//     links), which is only safe if the escaper knows exactly where they
//     are. In CommonMark a fence at the start of a line is a code block
//     at the top of the document: no list or quote (there are none: ">"
//     is escaped) can hold it. An indented fence may belong to a list
//     item and end with it, where the escaper cannot tell; so three or
//     more backticks or tildes anywhere but at the start of a line get a
//     zero-width space that makes them two, and the code blocks of the
//     result are exactly those opened by a fence at the start of a line,
//     closed as CommonMark closes them.
//
// A bare URL stays a link: it shows its own target.

// Markdown is text from the model, a tool or a person as Markdown, for
// markdown_text and markdown blocks, with a code block it leaves open
// closed.
func Markdown(s string) string {
	var e markdownEscaper
	out := e.write(s)
	return out + e.closer(out)
}

// MarkdownPart is Markdown for the text so far of a text that grows, as
// a streamed message shows it: a code block the text opens is left open
// for what follows. MarkdownPart(a) is a prefix of MarkdownPart(a+b) and
// of Markdown(a+b), so that a stream only ever appends.
func MarkdownPart(s string) string {
	var e markdownEscaper
	return e.write(s)
}

// markdownEscaper escapes text rune by rune: what it writes for a rune
// depends only on the text before it.
type markdownEscaper struct {
	fence    rune // '`' or '~' inside a code block, else 0
	fenceLen int  // the length of the fence that opened it

	started   bool // the line has a rune
	lead      rune // the fence character the line starts with, or 0
	leadLen   int  // how many of them
	inLead    bool // the line so far is that run
	restTick  bool // a backtick after the run
	restBlank bool // only spaces and tabs after the run

	run    rune // the fence character last written, outside a leading run
	runLen int  // how many of it in a row
	prev   rune // the previous rune of the text
	cr     bool // the previous rune was a carriage return
}

func (e *markdownEscaper) write(s string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/8)
	for _, r := range clean(s) {
		if e.cr && r == '\n' {
			e.cr = false
			continue // the \n of a \r\n, written already
		}
		e.cr = r == '\r'
		if r == '\r' {
			r = '\n'
		}
		e.rune(&b, r)
	}
	return b.String()
}

func (e *markdownEscaper) rune(b *strings.Builder, r rune) {
	defer func() { e.prev = r }()
	if r == '\n' {
		e.endLine()
		b.WriteByte('\n')
		return
	}
	fenceChar := r == '`' || r == '~'
	if !e.started {
		e.started, e.restBlank, e.restTick = true, true, false
		e.lead, e.leadLen, e.inLead = 0, 0, fenceChar
		if fenceChar {
			e.lead = r
		}
		e.run, e.runLen = 0, 0
	}
	if e.inLead && r == e.lead {
		e.leadLen++
		b.WriteRune(r) // a fence at the start of a line is never broken
		return
	}
	e.inLead = false
	if r == '`' {
		e.restTick = true
	}
	if r != ' ' && r != '\t' {
		e.restBlank = false
	}
	if fenceChar {
		if e.run == r && e.runLen >= 2 {
			b.WriteString(zwsp)
			e.runLen = 0
		}
		if e.run != r {
			e.run, e.runLen = r, 0
		}
		e.runLen++
		b.WriteRune(r)
		return
	}
	e.run, e.runLen = 0, 0
	switch r {
	case '&':
		b.WriteString("&amp;")
	case '<':
		b.WriteString("&lt;")
	case '>':
		b.WriteString("&gt;")
	case ']':
		b.WriteRune(r)
		if e.fence == 0 {
			b.WriteString(zwsp)
		}
	case '@':
		b.WriteRune(r)
		if e.fence == 0 && !wordRune(e.prev) {
			b.WriteString(zwsp)
		}
	default:
		b.WriteRune(r)
	}
}

// endLine opens or closes a code block at the end of a line, as
// CommonMark does for a fence at the start of a line: an opening fence
// is three or more backticks (and no backtick after them) or tildes; a
// closing one at least as many of the same, then only spaces.
func (e *markdownEscaper) endLine() {
	if e.started {
		switch {
		case e.fence == 0 && e.leadLen >= 3 && (e.lead == '~' || !e.restTick):
			e.fence, e.fenceLen = e.lead, e.leadLen
		case e.fence != 0 && e.lead == e.fence && e.leadLen >= e.fenceLen && e.restBlank:
			e.fence, e.fenceLen = 0, 0
		}
	}
	e.started = false
}

// closer is what closes the code block out leaves open, if any.
func (e *markdownEscaper) closer(out string) string {
	end := *e
	end.endLine()
	if end.fence == 0 {
		return ""
	}
	nl := "\n"
	if out == "" || strings.HasSuffix(out, "\n") {
		nl = ""
	}
	return nl + strings.Repeat(string(end.fence), end.fenceLen)
}

func wordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
}
