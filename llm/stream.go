package llm

import (
	"context"
	"time"
)

// TextFunc is told the text of a reply while it is produced: text is the
// whole reply text so far, never a fragment, so a receiver that shows it
// can simply replace what it showed. A reply that starts over (a retried
// request) starts again from a shorter text. An error stops the reply:
// the model call returns it.
type TextFunc func(ctx context.Context, text string) error

// Streamer is a Model that can show its reply's text as it is produced.
// It is optional: Stream falls back to Generate for models without it.
// Implementations must be safe for concurrent use.
type Streamer interface {
	Model
	// GenerateStream is Generate that calls fn as the reply's text
	// grows. It returns the complete reply, exactly what Generate would
	// have returned; fn's text never holds tool calls.
	GenerateStream(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error)
}

// Stream asks m for the reply to msgs and tells fn its text as it grows:
// through GenerateStream when m is a Streamer, else once, with the whole
// text, when the reply has arrived. fn is not called for a reply without
// text.
func Stream(ctx context.Context, m Model, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	if s, ok := m.(Streamer); ok && fn != nil {
		return s.GenerateStream(ctx, msgs, tools, fn)
	}
	reply, err := m.Generate(ctx, msgs, tools)
	if err != nil || fn == nil || reply.Content == "" {
		return reply, err
	}
	if err := fn(ctx, reply.Content); err != nil {
		return Message{}, err
	}
	return reply, nil
}

// GenerateStream is Generate with the reply's text streamed to fn
// (server-sent events; see Streamer).
func (o *OpenAI) GenerateStream(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	return o.generate(ctx, msgs, tools, fn)
}

// GenerateStream is Generate with the reply's text streamed to fn
// (server-sent events; see Streamer).
func (a *Anthropic) GenerateStream(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	return a.generate(ctx, msgs, tools, fn)
}

// GenerateStream retries like Generate; a retried request streams its
// text again from the start. When an attempt that had shown some text
// fails, fn is told that text once more with NoteRetrying after it (or
// NoteInterrupted when no attempt is left), so that a receiver that
// shows it finishes the broken text before the next attempt replaces it.
func (r *retrying) GenerateStream(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	var shown string
	track := func(ctx context.Context, text string) error {
		shown = text
		return fn(ctx, text)
	}
	broken := func(last bool) {
		if shown == "" || ctx.Err() != nil {
			return
		}
		note := NoteRetrying
		if last {
			note = NoteInterrupted
		}
		_ = fn(ctx, shown+"\n\n"+note) // the attempt's error is what counts; the note extends the text shown
		shown = ""
	}
	return r.generate(ctx, func() (Message, error) { return Stream(ctx, r.model, msgs, tools, track) }, broken)
}

// DemoWordPause is how long the demo model waits between two words of a
// streamed reply, so that a person sees it grow.
const DemoWordPause = 40 * time.Millisecond

// GenerateStream is Generate with the reply's text streamed word by word,
// DemoWordPause apart (no pause when d.Pause is negative).
func (d *Demo) GenerateStream(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	reply, err := d.Generate(ctx, msgs, tools)
	if err != nil || reply.Content == "" {
		return reply, err
	}
	pause := d.Pause
	if pause == 0 {
		pause = DemoWordPause
	}
	for i, end := range wordEnds(reply.Content) {
		if i > 0 && pause > 0 {
			if err := sleep(ctx, pause); err != nil {
				return Message{}, err
			}
		}
		if err := fn(ctx, reply.Content[:end]); err != nil {
			return Message{}, err
		}
	}
	return reply, nil
}

// wordEnds returns where each word of s ends, the white space before the
// next word included; the last is len(s).
func wordEnds(s string) []int {
	var ends []int
	inWord := false
	for i, r := range s {
		space := r == ' ' || r == '\n' || r == '\t'
		if !space && !inWord && i > 0 {
			ends = append(ends, i)
		}
		inWord = !space
	}
	return append(ends, len(s))
}
