// Package tools holds what the agent can do in the world: the Tool
// interface, the built-in tools, the registry that offers them to the
// model, and the policy file that says which calls need a person's
// approval, who may give it, and how long a request waits.
//
// It does not decide or execute anything by itself; the agent asks the
// registry and the policy, and runs a call only once it is approved.
//
// # Policy
//
// Without a policy file (DefaultPolicy) every tool is offered and every
// call needs approval by anyone in the channel, the person who asked
// included; a request expires after 24 hours, and http_request may call
// any host.
//
// With a policy file, only the tools it lists are offered, and a listed
// tool that is not registered is an error. A setting left out of a listed
// tool takes the same value as without a file: approval required,
// approvers empty (anyone in the channel), self_approval true, expires
// after 24h, allow_hosts empty (any host). self_approval defaults to true
// because leaving a key out should not add a limit that the file does not
// state, and because false with no other approver in the channel would
// leave every call waiting until it expires; write self_approval: false
// to require a second person.
//
// expires_after takes a Go duration ("90m", "24h") or whole days ("7d").
// approvers are Slack user IDs (U…, W…) or user-group IDs (S…), not names.
// allow_hosts is accepted only for http_request. Unknown keys are errors.
//
// # Arguments
//
// Registry.Validate checks a call's arguments against the tool's JSON
// schema (draft 2020-12 unless the schema says otherwise) and reports
// problems in words for a person, e.g. "url: missing property". Empty
// arguments are invalid, not read as {}.
//
// # Secrets
//
// What people and logs see of a call's arguments goes through
// MaskSecrets (credential headers); what they see of the configuration
// (an MCP server's URL and command, REDIS_URL) and of errors about it
// goes through Secrets.Redact, which hides what came from ${VAR}, env:
// and headers: values, and the password, query and fragment of URLs.
package tools

import (
	"context"
	"encoding/json"
)

// Tool is one capability the model may call.
// Implementations must be safe for concurrent use.
type Tool interface {
	// Name is how the model calls the tool (e.g. "http_request").
	Name() string
	// Description tells the model what the tool does.
	Description() string
	// Schema is the JSON schema of the arguments. The caller reads it
	// and changes nothing in it: a tool may return the same bytes at
	// every call (the model is shown them at every turn).
	Schema() json.RawMessage
	// Idempotent reports whether running the call twice with these
	// arguments has the effect of running it once. After a crash, a call
	// found running is run again only if it is idempotent.
	Idempotent(args json.RawMessage) bool
	// Call runs the tool. The result is text for the model. An error is a
	// failed call; the model is told of it.
	Call(ctx context.Context, args json.RawMessage) (string, error)
}

// Checker is implemented by tools that can tell from the arguments alone
// that a call would be refused when it runs — http_request to a host
// outside allow_hosts. The registry checks it with the schema, so such a
// call is an error to the model at once and never reaches a person.
type Checker interface {
	Check(args json.RawMessage) error
}
