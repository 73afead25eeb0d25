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
//   - Every "]" outside a code block is followed by a zero-width space,
//     so that no "](", "][" or "]:" is left: a bracket can no longer end
//     a link's label or a definition's name. A backslash escape would do
//     the same in CommonMark, but shows in inline code (and, were Slack
//     to read no backslash escapes, in all text, and would not help);
//     the space shows nowhere.
//   - "@" at the start of a word is followed by a zero-width space, so
//     that "@here", "@channel" and "@everyone" cannot broadcast.
//   - Code blocks are left as they are (their text is never read for
//     links), but only where the escaper knows they are code. In
//     CommonMark a fence at the start of a line opens a code block at the
//     top of the document — no list or quote can hold it (there are no
//     quotes: ">" is escaped) — which only its closing fence ends. A fence
//     after spaces or a list marker may belong to a list item and end
//     with it, where the escaper cannot tell; from the first such fence
//     on, the escaper keeps escaping everything, code or not: the code
//     still shows as code, with zero-width spaces in it.
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
	fence    rune // '`' or '~' inside a code block it knows of, else 0
	fenceLen int  // the length of the fence that opened it
	unsure   bool // a fence it cannot place was seen: escape everything

	started   bool // the line has a rune
	spaces    int  // the spaces the line starts with
	lead      rune // the fence character after them, or 0
	leadLen   int  // how many of them
	inLead    bool // the line so far is those spaces and that run
	restTick  bool // a backtick after the run
	restBlank bool // only spaces and tabs after the run
	marks     bool // the line so far is spaces, tabs and list markers

	run     rune // the fence character of the run being written
	runLen  int  // how many of it in a row
	runAt   bool // the run started where a list item's fence could
	runLead bool // the run started the line
	prev    rune // the previous rune of the text
	cr      bool // the previous rune was a carriage return
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
	if !e.started {
		e.started, e.spaces, e.lead, e.leadLen, e.inLead = true, 0, 0, 0, true
		e.restTick, e.restBlank, e.marks = false, true, true
		e.run, e.runLen = 0, 0
	}
	fenceChar := r == '`' || r == '~'
	switch {
	case e.inLead && r == ' ' && e.lead == 0:
		e.spaces++
	case e.inLead && fenceChar && (e.lead == 0 || e.lead == r):
		e.lead = r
		e.leadLen++
	default:
		e.inLead = false
		if r == '`' && e.lead != 0 {
			e.restTick = true
		}
		if r != ' ' && r != '\t' {
			e.restBlank = false
		}
	}
	// A run of three fence characters after nothing but spaces and list
	// markers, other than at the start of the line, may open or close a
	// code block of a list item: from then on the escaper is unsure.
	// Three in a row anywhere else cannot open a code block in
	// CommonMark, but might in a reader that is less strict: they get a
	// zero-width space that makes them two.
	if fenceChar {
		if e.run != r {
			e.run, e.runLen = r, 0
			e.runAt, e.runLead = e.marks && !(e.spaces == 0 && e.inLead), e.spaces == 0 && e.inLead
		}
		e.runLen++
		switch {
		case e.fence != 0 || e.runLead || e.runLen < 3:
		case e.runAt:
			e.unsure = true
		default:
			b.WriteString(zwsp)
			e.runLen = 1
		}
	} else {
		e.run, e.runLen = 0, 0
	}
	if !strings.ContainsRune(" \t-*+.)0123456789", r) {
		e.marks = false
	}
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
// CommonMark does for a block at the top of the document: an opening
// fence starts the line and is three or more backticks (and no backtick
// after them) or tildes; a closing one is at least as many of the same,
// after at most three spaces, then only spaces and tabs.
func (e *markdownEscaper) endLine() {
	if e.started {
		switch {
		case e.fence == 0 && !e.unsure && e.spaces == 0 && e.leadLen >= 3 && (e.lead == '~' || !e.restTick):
			e.fence, e.fenceLen = e.lead, e.leadLen
		case e.fence != 0 && e.spaces <= 3 && e.lead == e.fence && e.leadLen >= e.fenceLen && e.restBlank:
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
