package llm

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/tmc/langchaingo/llms"
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

// textStream turns langchaingo's streaming callback, which is handed text
// deltas and, for OpenAI, the JSON of tool-call deltas too, into a
// TextFunc of the text so far.
type textStream struct {
	fn    TextFunc
	text  strings.Builder
	calls bool // a tool-call delta was seen: no more text follows
}

func newTextStream(fn TextFunc) *textStream { return &textStream{fn: fn} }

// option is the call option that streams into s.
func (s *textStream) option() llms.CallOption {
	return llms.WithStreamingFunc(s.chunk)
}

func (s *textStream) chunk(ctx context.Context, chunk []byte) error {
	if len(chunk) == 0 || s.calls {
		return nil
	}
	if isToolCallDelta(chunk) {
		// langchaingo's OpenAI client hands tool-call deltas to the
		// same callback as text, as JSON. The API sends a reply's text
		// before its calls, so the text is complete here.
		s.calls = true
		return nil
	}
	s.text.Write(chunk)
	return s.fn(ctx, s.text.String())
}

// isToolCallDelta reports whether a streamed chunk is the JSON that
// langchaingo's OpenAI client makes of tool-call deltas: an array of
// objects with a "function" member. A text delta is a token or a few, so
// a whole such array in one never comes from the model's text.
func isToolCallDelta(chunk []byte) bool {
	if len(chunk) < 2 || chunk[0] != '[' || chunk[1] != '{' {
		return false
	}
	var deltas []struct {
		Function *json.RawMessage `json:"function"`
	}
	if json.Unmarshal(chunk, &deltas) != nil || len(deltas) == 0 {
		return false
	}
	for _, d := range deltas {
		if d.Function == nil {
			return false
		}
	}
	return true
}

// GenerateStream is Generate with the reply's text streamed to fn
// (server-sent events; see Streamer).
func (o *OpenAI) GenerateStream(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	return o.generate(ctx, msgs, tools, newTextStream(fn).option())
}

// GenerateStream is Generate with the reply's text streamed to fn
// (server-sent events; see Streamer).
func (a *Anthropic) GenerateStream(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	return a.generate(ctx, msgs, tools, newTextStream(fn).option())
}

// GenerateStream retries like Generate; a retried request streams its
// text again from the start.
func (r *retrying) GenerateStream(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	return r.generate(ctx, func() (Message, error) { return Stream(ctx, r.model, msgs, tools, fn) })
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
