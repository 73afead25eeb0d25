package runner

import (
	"context"

	"github.com/countersign/countersign/agent"
)

// Streaming. While the model writes an answer, the front end is told
// Thinking when the model is asked, then AnswerDelta with the answer's
// text so far each time it grows. The final Answer event still comes as
// before, once the answer is saved, delivered once and recorded as
// delivered: a front end that showed the growing text finishes that
// message with it rather than showing the answer again. A reply that asks
// for tool calls ends with StreamEnded instead (it is no answer).
//
// Streaming events are shown as they happen and are not recorded: a run
// cut off mid-stream runs its model step again, which streams the answer
// again (with the same Message position), and a front end that finds the
// cut-off message of an earlier process must finish it itself.

// OnStream is the agent's hook for a reply being written: the agent tells
// it when Options.Stream is set, so people see the answer grow.
func (s *Service) OnStream(ctx context.Context, st *agent.State, sm agent.Stream) {
	e := Event{Thread: runThread(ctx, st), State: st, Message: sm.Message, Text: sm.Text}
	switch {
	case sm.Phase == agent.Thinking:
		e.Kind = Thinking
	case sm.Phase == agent.Writing:
		e.Kind = AnswerDelta
	case sm.Phase == agent.Written && sm.Calls:
		e.Kind = StreamEnded
	default:
		// A complete answer is shown by the Answer event, once saved.
		return
	}
	_ = s.report(ctx, e)
}
