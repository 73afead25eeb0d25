package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// CallInfo says which call of which run a tool is running, for tools that
// need to know: an idempotency key for a server that deduplicates, and a
// person to ask when the tool needs more input.
type CallInfo struct {
	// Thread is the conversation's key.
	Thread string
	// Call is the call's key within the thread.
	Call string
	// Attempt counts the times this call was started, from 1.
	Attempt int
	// Requester is the person who asked for the call: the author of the
	// turn whose call runs (who may differ from whoever started the
	// thread). A tool's request for input goes to them, and only them.
	Requester string
	// Channel is where the conversation takes place.
	Channel string
	// EditedBy is who edited the arguments the call runs with, or "" if
	// they are the model's. A tool that acts as the Requester asks them to
	// confirm arguments someone else wrote.
	EditedBy string
	// CanPause says the run can pause for input: a tool whose server
	// needs input before it can go on returns an *InputRequiredError
	// rather than asking and waiting during the call.
	CanPause bool
	// Input, when set, holds the answers to the input requests an earlier
	// attempt of the call returned, and the server's state to send back.
	Input *InputReply
}

// InputRequest is one question a server needs answered before a call
// can go on ("input required", the newest MCP protocol's input
// requests).
type InputRequest struct {
	// Key is the server's name for the request, which its answer carries.
	Key string `json:"key"`
	// Message says what is asked.
	Message string `json:"message"`
	// Schema is the JSON schema of the answer, as the server wrote it.
	Schema json.RawMessage `json:"schema"`
}

// InputRequiredError is the outcome of a call whose server answered that
// it needs input first: it did nothing yet. The call is sent again with
// the answers (CallInfo.Input) and State, the server's opaque state, as
// it was given.
type InputRequiredError struct {
	Requests []InputRequest
	State    string
}

func (e *InputRequiredError) Error() string {
	return fmt.Sprintf("the server needs %d answer(s) before the call can go on", len(e.Requests))
}

// ConnectRequiredError is the outcome of a call that runs as the person
// who asked for it (auth: requester) when they have no connection to its
// server: nothing was sent. They were asked to connect; the connection,
// completed on any replica before Expires, lets the call go on.
type ConnectRequiredError struct {
	Server, User string
	Expires      time.Time
}

func (e *ConnectRequiredError) Error() string {
	return fmt.Sprintf("the call runs as %s on MCP server %q, who has not connected to it yet (nothing was sent)", e.User, e.Server)
}

// InputReply is what a call sends back after an InputRequiredError: the
// answers by request key, and the server's state.
type InputReply struct {
	State   string                  `json:"state,omitempty"`
	Answers map[string]ElicitAnswer `json:"answers"`
}

// InfoTool is a Tool that wants to know which call it runs. The agent
// calls CallWithInfo instead of Call for such a tool.
type InfoTool interface {
	Tool
	CallWithInfo(ctx context.Context, info CallInfo, args json.RawMessage) (string, error)
}

// ReadOnlyTool is a Tool that may say it only reads. A read-only tool
// that has no rule of its own in the policy runs without approval.
type ReadOnlyTool interface {
	Tool
	ReadOnly() bool
}

// ErrOutcomeUnknown wraps the error of a call that was cut off after it
// reached the system it acts on (a server that died mid-call): it may or
// may not have had its effect. The agent asks a person what happened,
// unless the tool is idempotent for the call's arguments.
var ErrOutcomeUnknown = errors.New("outcome unknown")

// Elicitation is a tool's request for input from the person who asked for
// the call (CallInfo.Requester), while the call runs.
type Elicitation struct {
	// Call is the call that asks.
	Call CallInfo
	// Tool is the name of the tool that asks, as the model calls it.
	Tool string
	// Message says what is asked.
	Message string
	// Schema is the JSON schema of the answer: an object of flat
	// properties (string, number, integer, boolean, enum).
	Schema json.RawMessage
}

// IdentityTool is a Tool that acts as someone: an MCP server's tool with
// OAuth. RunsAs says whose identity a call asked for by requester runs
// with: the requester's ID, "service" for the bot's own, or "" when the
// tool has none. The audit trail records it.
type IdentityTool interface {
	Tool
	RunsAs(requester string) string
}

// ElicitAction is how a person answered an Elicitation.
type ElicitAction string

// The answers to an Elicitation.
const (
	ElicitAccept  ElicitAction = "accept"
	ElicitDecline ElicitAction = "decline"
	ElicitCancel  ElicitAction = "cancel"
)

// ElicitAnswer is a person's answer to an Elicitation.
type ElicitAnswer struct {
	Action ElicitAction `json:"action"`
	// Content is the accepted answer, matching the schema.
	Content map[string]any `json:"content,omitempty"`
	// By is who answered.
	By string `json:"by,omitempty"`
}

// Elicitor asks the person behind a call for input and waits for the
// answer until ctx ends. Implementations are front ends (Slack) and must
// be safe for concurrent use.
type Elicitor interface {
	Elicit(ctx context.Context, e Elicitation) (ElicitAnswer, error)
}

// Origin says where a tool comes from, for people: on the approval card
// and in the list of tools.
type Origin struct {
	// Server is the name of the MCP server that provides the tool.
	Server string
	// Tool is the tool's name on that server.
	Tool string
	// Hints are the server's annotations of the tool, in words:
	// "read-only", "idempotent", "destructive", "open world".
	Hints []string
	// Trusted says whether the policy lets the hints set defaults.
	Trusted bool
}

// VersionedTool is a Tool whose definition can change while the bot runs:
// an MCP server's, when the server says its tools changed. Version
// identifies the definition a person deciding a call is shown and the
// call runs against (the tool's name at its server, description, schema
// and hints): the same definition gives the same version in every
// process, another gives another. The agent records it when the model
// makes a call, and refuses to run the call under another version, so
// that an approval never carries over to a tool that changed since.
type VersionedTool interface {
	Tool
	Version() string
}

// OriginTool is a Tool that comes from outside the bot.
type OriginTool interface {
	Tool
	Origin() Origin
}
