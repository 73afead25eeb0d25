package agent

import (
	"context"

	"github.com/countersign/countersign/llm"
)

// Streaming. The model node shows the model's reply as it is written:
// OnStream is told when the model is asked (Thinking), then the reply's
// text each time it grows, then once more when the reply is complete.
// What is saved is only ever the complete reply: the node appends it to
// the conversation after the model has finished, so a model call that
// fails or a process that dies mid-stream leaves no half message in the
// checkpoint, and the step runs again (the model is asked again) when the
// run is retried or recovered. A front end that showed the partial text
// must finish it itself (the text it showed is not in the conversation).

// StreamPhase says where a streamed reply is.
type StreamPhase int

// The phases of a streamed reply.
const (
	// Thinking: the model has been asked; nothing written yet.
	Thinking StreamPhase = iota + 1
	// Writing: Text is the reply's text so far.
	Writing
	// Written: the reply is complete; Text is all of its text and
	// Calls says whether it asks for tool calls. It is saved next.
	Written
)

func (p StreamPhase) String() string {
	switch p {
	case Thinking:
		return "thinking"
	case Writing:
		return "writing"
	case Written:
		return "written"
	}
	return "unknown"
}

// Stream is what OnStream is told.
type Stream struct {
	Phase StreamPhase
	// Message is the position the reply will have in State.Messages.
	Message int
	// Text is the reply's text so far (Writing) or all of it (Written).
	Text string
	// Calls: the complete reply asks for tool calls (Written only).
	Calls bool
}

// generate asks the model for the reply to msgs, telling OnStream about
// it as it is written.
func (a *Agent) generate(ctx context.Context, s *State, msgs []llm.Message) (llm.Message, error) {
	runnerStreams := a.stream && a.runner != nil
	if a.opts.OnStream == nil && !runnerStreams {
		return a.model.Generate(ctx, msgs, a.toolDefs())
	}
	tell := func(ctx context.Context, st Stream) {
		if a.opts.OnStream != nil {
			a.opts.OnStream(ctx, s, st)
		}
		if runnerStreams {
			a.runner.OnStream(ctx, s, st)
		}
	}
	at := len(s.Messages)
	tell(ctx, Stream{Phase: Thinking, Message: at})
	wrote := false
	reply, err := llm.Stream(ctx, a.model, msgs, a.toolDefs(), func(ctx context.Context, text string) error {
		wrote = true
		tell(ctx, Stream{Phase: Writing, Message: at, Text: text})
		return nil
	})
	if err != nil {
		return reply, err
	}
	if wrote || reply.Content != "" {
		tell(ctx, Stream{Phase: Written, Message: at, Text: reply.Content, Calls: len(reply.ToolCalls) > 0})
	}
	return reply, nil
}
