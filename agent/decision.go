package agent

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/countersign/countersign/tools"
)

// Kind is what a person decided about a pending tool call.
type Kind int

// The decisions. Their JSON names are stable: claims and checkpoints store
// them.
const (
	// Approve runs the call with the arguments the model gave.
	Approve Kind = iota + 1
	// Edit runs the call with new arguments.
	Edit
	// Reject does not run the call; the model is told who rejected it
	// and why.
	Reject
	// Respond answers every pending call with free-text feedback (a
	// reply in the thread): the calls are rejected with the text as the
	// reason.
	Respond
	// MarkDone settles a call whose outcome is unknown (the process died
	// while it ran) as done, without running it again. On such a call
	// Approve means "retry" and Reject means "skip".
	MarkDone
	// Expire is the system's decision about a call nobody decided before
	// its deadline: it is not run, and the model is told it timed out.
	Expire
	// Answer answers every input request of a call that is asking
	// (Decision.Answers), or says its requester connected: the call is
	// sent again (with the answers), under the approval it had.
	Answer
)

var kindNames = map[Kind]string{Approve: "approve", Edit: "edit", Reject: "reject", Respond: "respond", MarkDone: "mark_done", Expire: "expire", Answer: "answer"}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Past is the word a card shows after the decision: "approved", "edited"…
func (k Kind) Past() string {
	switch k {
	case Approve:
		return "approved"
	case Edit:
		return "edited"
	case Reject:
		return "rejected"
	case Respond:
		return "answered"
	case MarkDone:
		return "marked done"
	case Expire:
		return "expired"
	case Answer:
		return "answered"
	}
	return k.String()
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) {
	if s, ok := kindNames[k]; ok {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("unknown decision kind %d", int(k))
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Kind) UnmarshalText(b []byte) error {
	if kk, ok := ParseKind(string(b)); ok {
		*k = kk
		return nil
	}
	return fmt.Errorf("unknown decision kind %q", b)
}

// ParseKind is the Kind named s (as MarshalText writes it), and whether
// there is one: UnmarshalText without copying s.
func ParseKind(s string) (Kind, bool) {
	for k, name := range kindNames {
		if name == s {
			return k, true
		}
	}
	return 0, false
}

// Decision is one person's answer to one pending call (or, for Respond, to
// every pending call of a pause).
type Decision struct {
	Kind Kind `json:"kind"`
	// By is who decided, e.g. a Slack user ID.
	By string `json:"by"`
	// At is when.
	At time.Time `json:"at"`
	// Args are the new arguments of an Edit.
	Args json.RawMessage `json:"args,omitempty"`
	// Reason is a Reject's reason or a Respond's text.
	Reason string `json:"reason,omitempty"`
	// Hash binds an Approve to the exact call the person was shown, and
	// an Edit to the arguments they submitted: a hash of the tool and
	// the arguments, which the call must still have when it runs.
	Hash string `json:"hash,omitempty"`
	// Approvals are, for an Approve that needed several people, every
	// approval that counted toward it, oldest first; By is the last.
	Approvals []Approval `json:"approvals,omitempty"`
	// Answers are an Answer's answers, by input request key.
	Answers map[string]tools.ElicitAnswer `json:"answers,omitempty"`
}

// Approval is one person's approval of a call that needs several.
type Approval struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// Approvers are the people whose approvals decided d: those of
// Approvals, or By alone.
func (d Decision) Approvers() []string {
	if len(d.Approvals) == 0 {
		return []string{d.By}
	}
	out := make([]string, len(d.Approvals))
	for i, a := range d.Approvals {
		out[i] = a.By
	}
	return out
}

// Validate reports a decision that cannot be applied as it stands.
func (d Decision) Validate() error {
	switch d.Kind {
	case Approve, Reject, Respond, MarkDone:
	case Answer:
	case Edit:
		if !json.Valid(d.Args) {
			return fmt.Errorf("edit decision: arguments are not valid JSON")
		}
	case Expire:
		return nil
	default:
		return fmt.Errorf("decision: unknown kind %d", int(d.Kind))
	}
	if d.By == "" {
		return fmt.Errorf("%s decision: no decider", d.Kind)
	}
	return nil
}
