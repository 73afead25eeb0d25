// Package tools holds what the agent can do in the world: the Tool
// interface, the built-in tools, the registry that offers them to the
// model, and the policy file that says which calls need a person's
// approval, who may give it, and how long a request waits.
//
// It does not decide or execute anything by itself; the agent asks the
// registry and the policy, and runs a call only once it is approved.
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
	// Schema is the JSON schema of the arguments.
	Schema() json.RawMessage
	// Idempotent reports whether running the call twice with these
	// arguments has the effect of running it once. After a crash, a call
	// found running is run again only if it is idempotent.
	Idempotent(args json.RawMessage) bool
	// Call runs the tool. The result is text for the model. An error is a
	// failed call; the model is told of it.
	Call(ctx context.Context, args json.RawMessage) (string, error)
}
