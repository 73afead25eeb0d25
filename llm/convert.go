package llm

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/tmc/langchaingo/llms"
)

// emptySchema is sent for a tool that declares no parameters: both APIs
// want an object schema, not null.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// toLangchainTools converts tool definitions for a langchaingo call. The
// schema is passed as json.RawMessage, so it reaches the wire byte for byte.
func toLangchainTools(tools []ToolDef) ([]llms.Tool, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	out := make([]llms.Tool, 0, len(tools))
	for _, t := range tools {
		if t.Name == "" {
			return nil, fmt.Errorf("tool definition without a name")
		}
		params := t.Parameters
		if len(bytes.TrimSpace(params)) == 0 || string(bytes.TrimSpace(params)) == "null" {
			params = emptySchema
		} else if !json.Valid(params) {
			return nil, fmt.Errorf("tool %s: parameters are not valid JSON", t.Name)
		}
		out = append(out, llms.Tool{
			Type: "function",
			Function: &llms.FunctionDefinition{
				Name:        t.Name,
				Description: t.Description,
				Parameters:  params,
			},
		})
	}
	return out, nil
}

// toLangchainToolCall converts one call of an assistant message.
// langchaingo's OpenAI client copies Type into the request ("function" is
// the only valid value) and dereferences FunctionCall, so both are set.
func toLangchainToolCall(c ToolCall) llms.ToolCall {
	return llms.ToolCall{
		ID:           c.ID,
		Type:         "function",
		FunctionCall: &llms.FunctionCall{Name: c.Name, Arguments: c.Arguments},
	}
}

// checkMessages rejects what neither provider can represent.
func checkMessages(msgs []Message) error {
	if len(msgs) == 0 {
		return fmt.Errorf("no messages")
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant:
		case RoleTool:
			if m.ToolCallID == "" {
				return fmt.Errorf("message %d: tool message without a tool call ID", i)
			}
		default:
			return fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
		for j, c := range m.ToolCalls {
			if m.Role != RoleAssistant {
				return fmt.Errorf("message %d: tool calls in a %s message", i, m.Role)
			}
			if c.ID == "" || c.Name == "" {
				return fmt.Errorf("message %d: tool call %d without an ID or name", i, j)
			}
		}
	}
	return nil
}

// replyToolCall makes a model's tool call safe to store and to send back:
// a call without an ID gets one derived from its position in the
// conversation (some OpenAI-compatible servers send none; see
// madeUpCallID), and empty arguments become "{}" (a call of a tool
// without parameters).
func replyToolCall(id, name, args string, position, index int) ToolCall {
	if id == "" {
		id = madeUpCallID(position, index)
	}
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	return ToolCall{ID: id, Name: name, Arguments: args}
}

// Call IDs on the wire.
//
// A conversation keeps the IDs its calls were made with, whichever
// provider made them, and may be sent later to another one: the operator
// changed LLM_PROVIDER while a call waited for approval. Each provider
// refuses some IDs that others make: OpenAI takes at most 40 characters
// (vLLM's are "chatcmpl-tool-" and 32 hex digits), Anthropic only
// [a-zA-Z0-9_-] (Kimi's are "functions.name:0"), Mistral's API nine
// letters and digits only. Such an ID is sent under
// one derived from it, the same for the call and for its result, and in
// every request; the conversation itself keeps the original. IDs the
// provider takes are sent as they are: some servers want their own back
// exactly.

// maxOpenAICallID is the longest tool call ID OpenAI takes.
const maxOpenAICallID = 40

// openAICallID is the ID a call is sent to an OpenAI-compatible server
// under.
func openAICallID(id string) string {
	if len(id) <= maxOpenAICallID {
		return id
	}
	return "call_" + derivedCallID(id)
}

// mistralCallID is the ID a call is sent to Mistral's API under: nine
// letters and digits, which is all it takes ("Tool call id was … but
// must be a-z, A-Z, 0-9, with a length of 9").
func mistralCallID(id string) string {
	if mistralCallIDPattern.MatchString(id) {
		return id
	}
	return derivedCallID(id)[:9]
}

var mistralCallIDPattern = regexp.MustCompile(`^[a-zA-Z0-9]{9}$`)

// anthropicCallID is the ID a call is sent to Anthropic under.
func anthropicCallID(id string) string {
	if anthropicCallIDPattern.MatchString(id) {
		return id
	}
	return "toolu_" + derivedCallID(id)
}

var anthropicCallIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// derivedCallID is 24 letters and digits derived from id.
func derivedCallID(id string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	sum := sha256.Sum256([]byte("call id " + id))
	out := make([]byte, 24)
	for i := range out {
		out[i] = alphabet[int(sum[i])%len(alphabet)]
	}
	return string(out)
}

// callIDs are the IDs of the calls in msgs.
func callIDs(msgs []Message) map[string]bool {
	ids := map[string]bool{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			ids[c.ID] = true
		}
	}
	return ids
}
