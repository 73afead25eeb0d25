package slackui

import "strings"

// An answer's text as the thread shows it, while the model writes it and
// when it is final (package handlers streams it: stream.go).

// InterruptedNote ends a message whose answer was cut off.
const InterruptedNote = "… (interrupted; the answer continues below)"

// NoteAfter is the note to add to shown: after a space.
func NoteAfter(shown string) string {
	if shown == "" || strings.HasSuffix(shown, " ") || strings.HasSuffix(shown, "\n") {
		return InterruptedNote
	}
	return " " + InterruptedNote
}

// ShownAnswer is the text so far of an answer as the thread shows it
// while it grows: Markdown in a streamed message, mrkdwn in a posted one.
// A message that grows with the streaming methods can only be appended
// to, so while it grows its code blocks are left open (a closing fence
// added now would be in the way of the text that follows); the final
// text (FinalAnswer) closes them.
func ShownAnswer(native bool, s string) string {
	if native {
		return MarkdownPart(s)
	}
	return Mrkdwn(s)
}

// FinalAnswer is an answer's final text as the thread shows it: Markdown
// in a streamed message, mrkdwn in a posted one.
func FinalAnswer(native bool, s string) string {
	if native {
		return Markdown(s)
	}
	return Mrkdwn(s)
}
