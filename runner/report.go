package runner

import (
	"context"
	"fmt"
	"time"

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
	// CallDecided: Call.Decision was made (or the call expired). A call
	// whose decision was claimed with the save that starts it
	// (DecideAndDrive) has none: its CallStarted shows the decision.
	CallDecided
	// CallStarted and CallFinished: an approved call ran. A call whose
	// attempt ended asking for input or a connection (agent.Asking) is
	// reported finished too: it runs again once answered.
	CallStarted
	CallFinished
	// RunFailed: the run stopped on an error (Text) and can be retried,
	// unless Final: then retrying would fail the same way.
	RunFailed
	// GraphChanged: the bot was updated while the run waited, and the run
	// cannot go on as it was; Text says what changed, one change a line.
	// The way on is RestartChanged or CancelChanged.
	GraphChanged
	// Thinking: the model has been asked for its next turn.
	Thinking
	// AnswerDelta: the model is writing the reply that will be message
	// Message; Text is its text so far. The Answer event of that message
	// follows once it is saved (see OnStream).
	AnswerDelta
	// StreamEnded: the streamed reply at Message is complete and asks for
	// tool calls, so no Answer follows; Text is all of its text.
	StreamEnded
	// Reminder: Call has waited Waited for a decision; People are the
	// approvers to remind (user and user-group IDs; none: anyone may
	// decide).
	Reminder
	// Escalated: Call has waited Waited, and People (user and user-group
	// IDs) may now decide it too.
	Escalated
	// InboxChanged: calls began or stopped waiting in the thread, or
	// decisions were applied there (Inbox says which), and the inbox
	// index says so now. It comes after the work on the thread ended,
	// so a front end may show people their inboxes again.
	InboxChanged
	// ApprovalProgress: Call, which needs several approvals, still waits,
	// with the approvals in Gate; or its arguments were edited
	// (Call.Revision, Call.EditedBy) and the approvals start again.
	ApprovalProgress
	// RunCancelled: a person cancelled the run that waited while the bot
	// was updated (CancelChanged); People holds who. It stands for the
	// conversation's message at Message, which tells the model so: a
	// front end shows it as its own line, naming the person its way,
	// instead of an Answer.
	RunCancelled
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
	case Thinking:
		return "thinking"
	case AnswerDelta:
		return "answer_delta"
	case StreamEnded:
		return "stream_ended"
	case Reminder:
		return "reminder"
	case Escalated:
		return "escalated"
	case InboxChanged:
		return "inbox_changed"
	case ApprovalProgress:
		return "approval_progress"
	case RunCancelled:
		return "run_cancelled"
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
	// Message is, for Answer and the streaming events, the answer's
	// position in the conversation (State.Messages).
	Message int

	// Copies, on ApprovalNeeded, says where else the card goes (nil:
	// only the thread); see Copies.
	Copies *Copies
	// People and Waited are a Reminder's or an Escalated's: whom to
	// tell, and how long the call has waited. People of a RunCancelled
	// is who cancelled. People are IDs, never markup: front ends render
	// them.
	People []string
	Waited time.Duration
	// Inbox is, for InboxChanged, what changed.
	Inbox *InboxChange
	// Gate is, for ApprovalNeeded and ApprovalProgress of a pending call,
	// what to show about deciding it.
	Gate *Gate
	// Again, on ApprovalNeeded, says the card may be in the thread
	// already, unrecorded: the call waited in this decision round where
	// the work began, and the process that showed it then may have died,
	// or lost Slack's answer, between posting it and recording it. A
	// front end that can find that card takes it up rather than post a
	// second one, which the first would stay beside, its buttons live.
	Again bool
	// Final is, for RunFailed, that retrying cannot help (see
	// graph.Checkpoint.Final): a front end offers no retry, and Text,
	// the failure, says what to do instead when its cause knows.
	Final bool
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
