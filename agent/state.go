package agent

import (
	"encoding/json"
	"fmt"
	"iter"
	"time"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/tools"
)

// CallStatus is where one tool call stands.
type CallStatus int

// The statuses of a call. A call moves pending → approved | edited |
// rejected | expired → running → done | failed; a call that needs no
// approval starts approved. A call found running after a crash becomes
// unknown unless its tool is idempotent. A call whose server needs input
// before it can go on (tools.InputRequiredError) is asking until the
// person asked answers (then approved again, to be sent with the
// answers) or its input expires. Their JSON names are stable.
const (
	Pending CallStatus = iota + 1
	Approved
	Edited
	Rejected
	Expired
	Running
	Done
	Failed
	Unknown
	Asking
)

var statusNames = map[CallStatus]string{
	Pending: "pending", Approved: "approved", Edited: "edited", Rejected: "rejected",
	Expired: "expired", Running: "running", Done: "done", Failed: "failed", Unknown: "unknown",
	Asking: "asking",
}

func (s CallStatus) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("CallStatus(%d)", int(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s CallStatus) MarshalText() ([]byte, error) {
	if n, ok := statusNames[s]; ok {
		return []byte(n), nil
	}
	return nil, fmt.Errorf("unknown call status %d", int(s))
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *CallStatus) UnmarshalText(b []byte) error {
	for st, n := range statusNames {
		if n == string(b) {
			*s = st
			return nil
		}
	}
	return fmt.Errorf("unknown call status %q", b)
}

// Waiting reports whether the call waits for a person: pending, unknown
// after a crash, or asking for input.
func (s CallStatus) Waiting() bool { return s == Pending || s == Unknown || s == Asking }

// Settled reports whether the call is finished one way or another.
func (s CallStatus) Settled() bool {
	return s == Rejected || s == Expired || s == Done || s == Failed
}

// Call is one tool call of the model's latest turn, with its status.
type Call struct {
	// Key identifies the call within its thread ("<turn>.<index>"); the
	// model's own IDs are not guaranteed unique across turns.
	Key string `json:"key"`
	// ID is the model's tool call ID, which the tool result answers.
	ID   string `json:"id"`
	Tool string `json:"tool"`
	// Args are the arguments the model gave, in canonical form (see
	// tools.Canonical), or absent when they were not valid.
	Args json.RawMessage `json:"args,omitempty"`
	// EditedArgs are the arguments a person replaced them with, in
	// canonical form.
	EditedArgs json.RawMessage `json:"edited_args,omitempty"`
	// Hash is tools.ArgsHash of the tool and Args: what a card shows and
	// an approval is bound to. An edit's hash is its Decision's.
	Hash string `json:"hash,omitempty"`
	// Requester is who asked for the turn that made the call: the person
	// whose request a self-approval rule is about.
	Requester string `json:"requester,omitempty"`
	// Reason is what the model said alongside the call.
	Reason string     `json:"reason,omitempty"`
	Status CallStatus `json:"status"`
	// NeedsApproval is the policy's verdict when the call was made.
	NeedsApproval bool `json:"needs_approval,omitempty"`
	// Rule is who its rule let decide the call when it began to wait:
	// what still holds should the bot be updated and no longer offer the
	// tool. Calls saved before calls recorded it have none.
	Rule *CallRule `json:"rule,omitempty"`
	// Since is when the call began to wait for a person.
	Since time.Time `json:"since,omitzero"`
	// Expires is when a pending call expires.
	Expires time.Time `json:"expires,omitzero"`
	// Decision is the person's decision, if one was made.
	Decision *Decision `json:"decision,omitempty"`
	// Result is what the model is told about the call.
	Result  string `json:"result,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Images are the images of a done call's result (tools.ImageTool),
	// for the model to look at; Result has a line for each, which is all
	// people are shown.
	Images []llm.Image `json:"images,omitempty"`
	// Attempts counts the times the call was started.
	Attempts int `json:"attempts,omitempty"`
	// Unsent counts the times in a row the call was about to be sent
	// and was not, because the runner's last check before the send
	// (Runner.BeforeCall) failed: it is approved again, and the runner
	// retries the run on its own a bounded number of times.
	Unsent int `json:"unsent,omitempty"`

	// ApprovalsRequired is how many distinct people must approve the
	// call (its rule's approvals_required when it was made; 0 means 1).
	// While it waits for several, an Edit does not decide it: the call
	// waits again with the edited arguments, in a new Revision (a new
	// decision round, whose approvals start from none), and EditedBy
	// says who edited them last.
	ApprovalsRequired int    `json:"approvals_required,omitempty"`
	Revision          int    `json:"revision,omitempty"`
	EditedBy          string `json:"edited_by,omitempty"`

	// Input is what the call's server asked before it could go on, while
	// the call is asking, and then the answers it is sent again with.
	Input *CallInput `json:"input,omitempty"`

	// ToolVersion is the tool's definition when the call was made
	// (tools.VersionedTool; empty for tools whose definition cannot
	// change): the call runs only under that version.
	ToolVersion string `json:"tool_version,omitempty"`
}

// CallInput is a call's pause for input: what its server asked (or that
// the requester must connect to it first), of whom,
// and its opaque state, saved with the call like an approval (the
// call's Since and Expires say since and until when). Answers are set
// once every request is answered, and sent with the call's next attempt.
type CallInput struct {
	Requests []tools.InputRequest `json:"requests"`
	// State is the server's opaque state, sent back as it was given.
	State string `json:"state,omitempty"`
	// Connect, instead of Requests, is the MCP server the call waits for
	// its requester to connect to (auth: requester).
	Connect string `json:"connect,omitempty"`
	// Of is who is asked: the call's requester, and only them.
	Of      string                        `json:"of"`
	Answers map[string]tools.ElicitAnswer `json:"answers,omitempty"`
}

// Request returns the call's input request with key.
func (in *CallInput) Request(key string) (tools.InputRequest, bool) {
	for _, r := range in.Requests {
		if r.Key == key {
			return r, true
		}
	}
	return tools.InputRequest{}, false
}

// CallRule is what a call's rule said, when the call began to wait, about
// who may decide it.
type CallRule struct {
	// Approvers are user and user-group IDs; none means anyone in the
	// channel.
	Approvers []string `json:"approvers,omitempty"`
	// SelfApproval: the person who asked may approve the call too.
	SelfApproval bool `json:"self_approval,omitempty"`
}

// Quorum is how many distinct people must approve the call: at least 1.
func (c *Call) Quorum() int { return max(1, c.ApprovalsRequired) }

// Editor is who edited the arguments the call runs with, or "" if they
// are the model's.
func (c *Call) Editor() string {
	if c.Decision != nil && c.Decision.Kind == Edit {
		return c.Decision.By
	}
	if len(c.EditedArgs) > 0 {
		return c.EditedBy
	}
	return ""
}

// UnmarshalJSON implements json.Unmarshaler.
func (c *Call) UnmarshalJSON(b []byte) error {
	type plain Call
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*c = Call(p)
	c.unescapeArgs()
	if c.Hash == "" && len(c.Args) > 0 && c.NeedsApproval {
		c.Hash = tools.ArgsHash(c.Tool, c.Args)
	}
	return nil
}

// unescapeArgs puts the arguments of a call read back as they were made:
// a checkpoint holds them as json.Marshal writes them, with <, > and &
// escaped (tools.UnescapeHTML), and what a card, the Edit form or a
// result shows of them must be what the call was made with.
func (c *Call) unescapeArgs() {
	c.Args = tools.UnescapeHTML(c.Args)
	c.EditedArgs = tools.UnescapeHTML(c.EditedArgs)
	if c.Decision != nil {
		c.Decision.Args = tools.UnescapeHTML(c.Decision.Args)
	}
}

// RunArgs are the arguments the call runs with: the edited ones if any.
func (c *Call) RunArgs() json.RawMessage {
	if len(c.EditedArgs) > 0 {
		return c.EditedArgs
	}
	return c.Args
}

// RunHash is tools.ArgsHash of the call's tool and RunArgs: the hash a
// decision to run it must carry.
func (c *Call) RunHash() string { return tools.ArgsHash(c.Tool, c.RunArgs()) }

// AskedBy is who asked for the call: its turn's requester, or for calls
// saved before calls recorded one, the conversation's.
func (c *Call) AskedBy(s *State) string {
	if c.Requester != "" {
		return c.Requester
	}
	return s.Requester
}

// Note is a message someone left in the thread while calls waited for a
// decision they were not allowed to make. It reaches the model with the
// calls' results.
type Note struct {
	By   string    `json:"by"`
	Text string    `json:"text"`
	At   time.Time `json:"at"`
}

// State is the agent's graph state: one conversation in one thread.
type State struct {
	// Thread, Requester and Channel say where the conversation happens
	// and who started it (Slack IDs, or whatever the front end uses).
	Thread    string `json:"thread,omitempty"`
	Requester string `json:"requester,omitempty"`
	Channel   string `json:"channel,omitempty"`
	// Team is the workspace of Channel, where the front end has one.
	Team string `json:"team,omitempty"`
	// TurnBy is who wrote the latest user message: the requester of the
	// calls the model makes in answer to it.
	TurnBy string `json:"turn_by,omitempty"`
	// Notes are messages to hand the model once the waiting calls are
	// settled.
	Notes []Note `json:"notes,omitempty"`
	// Messages is the conversation, without the system prompt. It is the
	// state's journal: checkpoints store each message once.
	Messages []llm.Message `json:"-"`
	// Calls are the tool calls of the model's latest turn, until their
	// results are added to Messages.
	Calls []Call `json:"calls,omitempty"`
	// Cancelled, when a person ended the run with Cancel, says who, and
	// which message tells the model so: a front end shows that message as
	// its own line, naming the person its way.
	Cancelled *Cancellation `json:"cancelled,omitempty"`
	// Turns counts model turns in the thread; PassTurns those since the
	// last user message.
	Turns     int `json:"turns"`
	PassTurns int `json:"pass_turns"`
}

// Cancellation is who cancelled a run (Agent.Cancel), and the message
// (an index in State.Messages) that says so.
type Cancellation struct {
	By      string `json:"by"`
	Message int    `json:"message"`
}

// Waiting returns the calls that wait for a person.
func (s *State) Waiting() []Call {
	n := s.NumWaiting()
	if n == 0 {
		return nil
	}
	out := make([]Call, 0, n)
	for i := range s.Calls {
		if s.Calls[i].Status.Waiting() {
			out = append(out, s.Calls[i])
		}
	}
	return out
}

// AllWaiting yields the calls that wait for a person, in Waiting's order,
// without making a slice of them: for callers that only look.
func (s *State) AllWaiting() iter.Seq[Call] {
	return func(yield func(Call) bool) {
		for i := range s.Calls {
			if s.Calls[i].Status.Waiting() && !yield(s.Calls[i]) {
				return
			}
		}
	}
}

// NumWaiting returns how many calls wait for a person: len(Waiting()).
func (s *State) NumWaiting() int {
	n := 0
	for i := range s.Calls {
		if s.Calls[i].Status.Waiting() {
			n++
		}
	}
	return n
}

// Call returns the current call with key.
func (s *State) Call(key string) (*Call, bool) {
	for i := range s.Calls {
		if s.Calls[i].Key == key {
			return &s.Calls[i], true
		}
	}
	return nil, false
}

// Answer returns the last assistant message's text, if the conversation
// ends with one.
func (s *State) Answer() string {
	if n := len(s.Messages); n > 0 && s.Messages[n-1].Role == llm.RoleAssistant {
		return s.Messages[n-1].Content
	}
	return ""
}

// JournalLen implements graph.Journaled.
func (s *State) JournalLen() int { return len(s.Messages) }

// MarshalJournal implements graph.Journaled.
func (s *State) MarshalJournal(from int) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(s.Messages)-from)
	for i := range s.Messages[from:] {
		m := &s.Messages[from+i]
		out = append(out, appendMessage(make([]byte, 0, messageSize(m)), m))
	}
	return out, nil
}

// turnRoom is the room a decoded conversation is given for the messages
// a turn adds (the user's, the model's replies, the tools' results), so
// that the turn appends them without copying the conversation.
const turnRoom = 8

// UnmarshalJournal implements graph.Journaled.
func (s *State) UnmarshalJournal(entries []json.RawMessage) error {
	s.Messages = make([]llm.Message, len(entries), len(entries)+turnRoom)
	for i, e := range entries {
		if err := s.Messages[i].DecodeJSON(e); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
	}
	return nil
}

// ShareJournal makes s's messages from's, without copying them: messages
// are never changed once added, and an append to s copies them first.
// The graph engine uses it to keep a thread's decoded conversation
// between runs.
func (s *State) ShareJournal(from *State) {
	s.Messages = from.Messages[:len(from.Messages):len(from.Messages)]
}

// TakeJournal is ShareJournal with the room after from's messages: s
// appends to them in place. The graph engine hands a thread's room to
// one run at a time, so that a step of a long conversation does not copy
// it to append a message.
func (s *State) TakeJournal(from *State) {
	s.Messages = from.Messages
}

// AppendJournal decodes entries onto the end of the messages.
func (s *State) AppendJournal(entries []json.RawMessage) error {
	n := len(s.Messages)
	msgs := make([]llm.Message, n+len(entries), n+len(entries)+turnRoom)
	copy(msgs, s.Messages)
	for i, e := range entries {
		if err := msgs[n+i].DecodeJSON(e); err != nil {
			return fmt.Errorf("message %d: %w", n+i, err)
		}
	}
	s.Messages = msgs
	return nil
}
