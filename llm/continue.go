package llm

import (
	"context"
	"strings"
	"unicode"
)

// Continuing an answer cut off at the length limit.
//
// A reply cut off at the length limit with no tool call in it is
// continued, once: the model is asked again with the partial text as the
// last assistant message and the two texts are joined into one reply.
// Anthropic continues an assistant message that ends the conversation
// where it stands (a prefill, without trailing white space, which it
// refuses); an OpenAI-compatible server is asked to go on by a user
// message after it. The continuation is not part of the conversation:
// only the joined reply is. A reply cut off again keeps its note, and
// so does one whose continuation failed (unless the call was cancelled):
// the partial answer stands.

// ContinuePrompt is the user message that asks a model without prefill
// to continue its cut-off answer.
const ContinuePrompt = "Your last answer was cut off at the length limit. Continue it exactly where it stopped: do not repeat anything and do not start over."

// Continue returns m continuing cut-off answers once (see above).
// prefill: the provider continues a final assistant message itself
// (Anthropic); otherwise a user message asks for the rest. The result
// streams when m does, and forwards ToolChecker.
func Continue(m Model, prefill bool) Model {
	return &continuing{model: m, prefill: prefill}
}

type continuing struct {
	model   Model
	prefill bool
}

var (
	_ Streamer    = (*continuing)(nil)
	_ ToolChecker = (*continuing)(nil)
)

func (c *continuing) Name() string { return c.model.Name() }

func (c *continuing) CheckTools(defs []ToolDef) []LeftOut {
	if tc, ok := c.model.(ToolChecker); ok {
		return tc.CheckTools(defs)
	}
	return nil
}

func (c *continuing) Generate(ctx context.Context, msgs []Message, tools []ToolDef) (Message, error) {
	return c.generate(ctx, msgs, tools, nil)
}

func (c *continuing) GenerateStream(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	return c.generate(ctx, msgs, tools, fn)
}

func (c *continuing) generate(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	reply, err := Stream(ctx, c.model, msgs, tools, fn)
	if err != nil {
		return reply, err
	}
	partial, ok := cutText(reply)
	if !ok {
		return reply, nil
	}
	if c.prefill {
		partial = strings.TrimRightFunc(partial, unicode.IsSpace)
	}
	ask := append(msgs[:len(msgs):len(msgs)], Message{Role: RoleAssistant, Content: partial})
	if !c.prefill {
		ask = append(ask, Message{Role: RoleUser, Content: ContinuePrompt})
	}
	var sep string
	joined := func(more string) string {
		if sep == "" && !c.prefill && more != "" && !startsWithSpace(more) {
			sep = " "
		}
		return partial + sep + more
	}
	var moreFn TextFunc
	if fn != nil {
		moreFn = func(ctx context.Context, text string) error { return fn(ctx, joined(text)) }
	}
	more, err := Stream(ctx, c.model, ask, tools, moreFn)
	if err != nil {
		if ctx.Err() != nil {
			return Message{}, err
		}
		return reply, nil // the cut-off answer, with its note
	}
	if strings.TrimSpace(more.Content) == "" && len(more.ToolCalls) == 0 {
		return reply, nil
	}
	out := more
	out.Content = joined(more.Content)
	if reply.Usage != nil || more.Usage != nil {
		var u Usage
		for _, r := range []*Usage{reply.Usage, more.Usage} {
			if r != nil {
				u.Input += r.Input
				u.Output += r.Output
			}
		}
		out.Usage = &u
	}
	return out, nil
}

// cutText returns the text of a reply cut off at the length limit,
// without its note, when the reply is one to continue: text only, no
// tool call.
func cutText(reply Message) (string, bool) {
	if reply.Stop != StopCutOff || len(reply.ToolCalls) > 0 {
		return "", false
	}
	text := strings.TrimSuffix(strings.TrimSuffix(reply.Content, NoteCutOff), "\n\n")
	if strings.TrimSpace(text) == "" {
		return "", false
	}
	return text, true
}

func startsWithSpace(s string) bool {
	for _, r := range s {
		return unicode.IsSpace(r)
	}
	return false
}
