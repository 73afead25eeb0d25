package runner

import (
	"context"
	"fmt"

	"github.com/countersign/countersign/agent"
)

// EventKind says what happened in a conversation.
type EventKind int

// The events a front end shows.
const (
	// Answer: the agent answered; Text holds it.
	Answer EventKind = iota + 1
	// ApprovalNeeded: Call waits for a person (pending, or unknown after
	// a crash: then the choices are retry, mark done, skip).
	ApprovalNeeded
	// CallDecided: Call.Decision was made (or the call expired).
	CallDecided
	// CallStarted and CallFinished: an approved call ran.
	CallStarted
	CallFinished
	// RunFailed: the run stopped on an error (Text) and can be retried.
	RunFailed
	// GraphChanged: the bot was updated while the run waited, and the run
	// cannot go on as it was; Text says what changed, one change a line.
	// The way on is RestartChanged or CancelChanged.
	GraphChanged
)

func (k EventKind) String() string {
	switch k {
	case Answer:
		return "answer"
	case ApprovalNeeded:
		return "approval_needed"
	case CallDecided:
		return "call_decided"
	case CallStarted:
		return "call_started"
	case CallFinished:
		return "call_finished"
	case RunFailed:
		return "run_failed"
	case GraphChanged:
		return "graph_changed"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one thing to show.
type Event struct {
	Kind   EventKind
	Thread string
	// State is the conversation as of the event (requester, channel,
	// messages), when known.
	State *agent.State
	Call  *agent.Call
	Text  string
}

// Reporter shows events to people. Report is called from the goroutine
// doing the work; implementations must be safe for concurrent use. An
// error is logged and does not stop the run.
type Reporter interface {
	Report(ctx context.Context, e Event) error
}

// ReporterFunc adapts a function to Reporter.
type ReporterFunc func(ctx context.Context, e Event) error

// Report calls f.
func (f ReporterFunc) Report(ctx context.Context, e Event) error { return f(ctx, e) }
