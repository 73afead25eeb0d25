package llmtest

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/countersign/countersign/llm"
)

// AnthropicServer is a local server that speaks Anthropic's Messages API
// (POST /v1/messages; /messages is accepted too): a JSON reply, or
// server-sent events (message_start, content_block_start,
// content_block_delta, ...) when the request asks for "stream": true. It
// answers from a script of replies and records every request. Before
// answering, it checks a request the way the real API does where
// converters go wrong, and answers HTTP 400 with Anthropic's error JSON
// when:
//
//   - the anthropic-version header, model or max_tokens is missing;
//   - a message's role is not user or assistant (the system prompt is the
//     top-level "system" field), the first message is not the user's, or
//     two messages in a row have the same role;
//   - a message is empty, or has an empty text block;
//   - the final assistant message (a prefill) ends with white space;
//   - a tool_use block (assistant only) lacks an id or name, has an id
//     outside [a-zA-Z0-9_-] (so has a tool_result's tool_use_id), repeats
//     an id, or has an input that is not a JSON object;
//   - the tool_use blocks of an assistant message are not all answered by
//     tool_result blocks in the immediately following user message, or a
//     tool_result answers no tool_use of the message before it, or comes
//     after other content in its message;
//   - a tool has no valid name or no object input_schema, or its
//     input_schema has oneOf, anyOf or allOf at the top level;
//   - an image block, in a message or in a tool_result's content, is not
//     base64 data of a PNG, JPEG, GIF or WebP image whose bytes are of
//     its media_type, or a tool_result's content holds a block other
//     than text and image;
//   - temperature is outside 0 to 1.
//
// With extended thinking on (the request's "thinking", or ThinkAlways),
// each reply starts with thinking blocks (the scripted reply's Thinking,
// signed by the server, or one of its own), and a request is refused, as
// the real API refuses it, when:
//
//   - budget_tokens is below 1024 or not below max_tokens, or a
//     temperature is set;
//   - the conversation ends with an assistant message (a prefill, or a
//     paused turn sent back) that does not start with a thinking block;
//   - the assistant message of the tool calls the last tool results
//     answer does not start with a thinking or redacted_thinking block.
//
// Whether thinking is on or not, a thinking block whose thinking and
// signature are not what the server sent, or a redacted_thinking block
// whose data it did not send, is refused ("Invalid signature").
type AnthropicServer struct {
	t      testing.TB
	srv    *httptest.Server
	script script

	mu       sync.Mutex
	requests []AnthropicRequest
	usage    [2]int // input and output tokens each reply reports
	// thinkAlways: thinking is on whatever the request says.
	thinkAlways bool
	// signed are the thinking blocks sent, by signature; redacted the
	// data of the redacted_thinking blocks sent.
	signed   map[string]string
	redacted map[string]bool
}

// ThinkAlways makes the server think before every reply, as a proxy that
// turns extended thinking on for every request does: each reply starts
// with thinking blocks, which the next requests must send back.
func (s *AnthropicServer) ThinkAlways() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.thinkAlways = true
}

// ReportUsage makes every reply report these token counts (0 by default),
// where the real API does: in a JSON answer's usage; in a stream, the
// input tokens in message_start and the output tokens in message_delta.
func (s *AnthropicServer) ReportUsage(input, output int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usage = [2]int{input, output}
}

// AnthropicRequest is one request the server received.
type AnthropicRequest struct {
	Path   string
	Header http.Header
	// Body is the request body as received.
	Body      json.RawMessage
	Model     string
	MaxTokens int
	// System is the top-level system prompt (text blocks joined).
	System string
	// ThinkingBudget is the request's thinking.budget_tokens, 0 without
	// extended thinking; Temperature its temperature, if set.
	ThinkingBudget int
	Temperature    *float64
	Messages       []AnthropicMessage
	Tools          []AnthropicTool
	// Status is the HTTP status the server answered with.
	Status int
	// Problem is why the server answered 400, or "".
	Problem string
}

// AnthropicMessage is a message of a request. Content given as a plain
// string is recorded as one text block.
type AnthropicMessage struct {
	Role    string
	Content []AnthropicBlock
}

// AnthropicBlock is one content block.
type AnthropicBlock struct {
	Type string `json:"type"`
	// Text of a text block.
	Text string `json:"text,omitempty"`
	// ID, Name and Input of a tool_use block.
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// ToolUseID, Content and IsError of a tool_result block; Content is
	// a string or a list of blocks.
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	// Thinking and Signature of a thinking block, Data of a
	// redacted_thinking block.
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	Data      string `json:"data,omitempty"`
	// Source of an image block.
	Source *AnthropicImageSource `json:"source,omitempty"`
}

// AnthropicImageSource is where an image block's image is: base64 data
// of a media type.
type AnthropicImageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// Images returns the images of the message's own image blocks (those a
// user message holds beside its text, not those inside its tool_result
// blocks), in order.
func (m AnthropicMessage) Images() []llm.Image {
	var out []llm.Image
	for _, b := range m.Content {
		if b.Type == "image" && b.Source != nil {
			if img, why := checkImage(b.Source.MediaType, b.Source.Data); why == "" {
				out = append(out, img)
			}
		}
	}
	return out
}

// Text returns the message's text blocks, joined with newlines.
func (m AnthropicMessage) Text() string {
	var parts []string
	for _, b := range m.Content {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// Images returns the images of a tool_result block's content, in order.
func (b AnthropicBlock) Images() []llm.Image {
	var blocks []AnthropicBlock
	if json.Unmarshal(b.Content, &blocks) != nil {
		return nil
	}
	var out []llm.Image
	for _, blk := range blocks {
		if blk.Type == "image" && blk.Source != nil {
			if img, why := checkImage(blk.Source.MediaType, blk.Source.Data); why == "" {
				out = append(out, img)
			}
		}
	}
	return out
}

// checkImageBlock says why the API refuses an image block, or "".
func checkImageBlock(b AnthropicBlock) string {
	if b.Source == nil || b.Source.Type != "base64" {
		return "source: this server takes base64 images only"
	}
	_, why := checkImage(b.Source.MediaType, b.Source.Data)
	return why
}

// ResultText returns a tool_result block's content as text.
func (b AnthropicBlock) ResultText() string {
	text, _ := anthropicText(b.Content)
	return text
}

// AnthropicTool is a tool offered in a request.
type AnthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// NewAnthropicServer starts a server that answers with replies, in
// order, and stops it when the test ends. A reply's Stop gives its
// stop_reason: StopPaused "pause_turn", StopRefused "refusal",
// StopCutOff "max_tokens". Point a client at URL(). A
// reply's tool call arguments must be JSON objects (Anthropic's input).
func NewAnthropicServer(t testing.TB, replies ...llm.Message) *AnthropicServer {
	t.Helper()
	s := &AnthropicServer{t: t, signed: map[string]string{}, redacted: map[string]bool{}}
	s.Then(replies...)
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the base URL for a client, ending in /v1.
func (s *AnthropicServer) URL() string { return s.srv.URL + "/v1" }

// Then appends replies to the script. Call it from the test goroutine:
// a reply that cannot be sent fails the test.
func (s *AnthropicServer) Then(replies ...llm.Message) {
	s.t.Helper()
	for _, r := range replies {
		for _, c := range r.ToolCalls {
			if !isJSONObject(json.RawMessage(c.Arguments)) {
				s.t.Fatalf("llmtest: scripted Anthropic tool call %q: arguments %q are not a JSON object", c.Name, c.Arguments)
			}
		}
	}
	s.script.push(replies...)
}

// ThenRaw appends raw answers to the script (see Raw).
func (s *AnthropicServer) ThenRaw(raws ...Raw) { s.script.pushRaw(raws...) }

// FailNext makes the next n requests fail with the HTTP status (e.g. 500,
// 429 or 529) before the script goes on.
func (s *AnthropicServer) FailNext(n, status int) { s.script.failNext(n, status) }

// Requests returns every request received so far, in order.
func (s *AnthropicServer) Requests() []AnthropicRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

func (s *AnthropicServer) record(r AnthropicRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
}

func (s *AnthropicServer) handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/messages" && r.URL.Path != "/messages" {
		anthropicError(w, http.StatusNotFound, "Not found: "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		anthropicError(w, http.StatusMethodNotAllowed, "Method not allowed")
		return
	}
	body, err := readBody(r)
	if err != nil {
		anthropicError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	rec := AnthropicRequest{Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	n, fail := s.script.begin()
	reject := func(msg string) {
		rec.Status, rec.Problem = http.StatusBadRequest, msg
		s.record(rec)
		anthropicError(w, rec.Status, msg)
	}
	req, perr := parseAnthropic(body)
	if perr != nil {
		reject(perr.msg)
		return
	}
	rec.Model, rec.MaxTokens, rec.System, rec.Messages, rec.Tools = req.model, req.maxTokens, req.system, req.messages, req.tools
	rec.ThinkingBudget, rec.Temperature = req.thinkingBudget, req.temperature
	if fail != 0 {
		rec.Status = fail
		s.record(rec)
		anthropicError(w, fail, fmt.Sprintf("llmtest: scripted failure %d", fail))
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		reject("anthropic-version: header is required")
		return
	}
	if p := validateAnthropic(req); p != nil {
		reject(p.msg)
		return
	}
	s.mu.Lock()
	thinking := req.thinking || s.thinkAlways
	p := s.validateThinking(req, thinking)
	s.mu.Unlock()
	if p != nil {
		reject(p.msg)
		return
	}
	reply, raw, ok := s.script.take()
	if !ok {
		reject(exhausted(n))
		return
	}
	rec.Status = http.StatusOK
	if raw != nil {
		rec.Status = cmp.Or(raw.Status, http.StatusOK)
		s.record(rec)
		raw.write(w)
		return
	}
	s.record(rec)
	resp := anthropicResponse(n, req.model, reply)
	s.mu.Lock()
	if thinking {
		resp["content"] = append(s.thinkingBlocks(n, reply), resp["content"].([]map[string]any)...)
	}
	resp["usage"] = map[string]int{"input_tokens": s.usage[0], "output_tokens": s.usage[1]}
	s.mu.Unlock()
	if req.stream {
		s.streamAnthropic(w, n, req.model, resp)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

type anthropicRequest struct {
	model     string
	maxTokens int
	system    string
	messages  []AnthropicMessage
	tools     []AnthropicTool
	stream    bool
	// thinking: extended thinking is on, with thinkingBudget tokens.
	thinking       bool
	thinkingBudget int
	temperature    *float64
}

// parseAnthropic decodes a request body; content given as a string
// becomes one text block.
func parseAnthropic(body []byte) (*anthropicRequest, *problem) {
	var wire struct {
		Model     string          `json:"model"`
		MaxTokens int             `json:"max_tokens"`
		System    json.RawMessage `json:"system"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools       []AnthropicTool `json:"tools"`
		Stream      bool            `json:"stream"`
		Temperature *float64        `json:"temperature"`
		Thinking    *struct {
			Type         string `json:"type"`
			BudgetTokens int    `json:"budget_tokens"`
		} `json:"thinking"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		return nil, badf("", "invalid request body: %v", err)
	}
	system, ok := anthropicText(wire.System)
	if !ok {
		return nil, badf("", "system: Input should be a valid string or a list of text blocks")
	}
	if t := wire.Temperature; t != nil && (*t < 0 || *t > 1) {
		return nil, badf("", "temperature: range: 0..1")
	}
	req := &anthropicRequest{model: wire.Model, maxTokens: wire.MaxTokens, system: system, tools: wire.Tools, stream: wire.Stream, temperature: wire.Temperature}
	if th := wire.Thinking; th != nil {
		switch th.Type {
		case "enabled":
			req.thinking, req.thinkingBudget = true, th.BudgetTokens
			switch {
			case th.BudgetTokens < 1024:
				return nil, badf("", "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
			case th.BudgetTokens >= wire.MaxTokens:
				return nil, badf("", "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size")
			case wire.Temperature != nil && *wire.Temperature != 1:
				return nil, badf("", "`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility")
			}
		case "disabled":
		default:
			return nil, badf("", "thinking: Input tag '%s' found using 'type' does not match any of the expected tags: 'disabled', 'enabled'", th.Type)
		}
	}
	for i, m := range wire.Messages {
		msg := AnthropicMessage{Role: m.Role}
		var text string
		if err := json.Unmarshal(m.Content, &text); err == nil {
			msg.Content = []AnthropicBlock{{Type: "text", Text: text}}
		} else if err := json.Unmarshal(m.Content, &msg.Content); err != nil {
			return nil, badf("", "messages.%d.content: Input should be a valid string or a list of content blocks", i)
		}
		req.messages = append(req.messages, msg)
	}
	return req, nil
}

func validateAnthropic(req *anthropicRequest) *problem {
	switch {
	case req.model == "":
		return badf("", "model: Field required")
	case req.maxTokens <= 0:
		return badf("", "max_tokens: Field required")
	case len(req.messages) == 0:
		return badf("", "messages: at least one message is required")
	}
	for i, t := range req.tools {
		if !functionName.MatchString(t.Name) {
			return badf("", "tools.%d.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", i)
		}
		var schema struct {
			Type  string          `json:"type"`
			OneOf json.RawMessage `json:"oneOf"`
			AnyOf json.RawMessage `json:"anyOf"`
			AllOf json.RawMessage `json:"allOf"`
		}
		if len(t.InputSchema) == 0 || json.Unmarshal(t.InputSchema, &schema) != nil {
			return badf("", "tools.%d.input_schema: Field required", i)
		}
		if schema.OneOf != nil || schema.AnyOf != nil || schema.AllOf != nil {
			return badf("", "tools.%d.custom.input_schema: input_schema does not support oneOf, allOf, or anyOf at the top level", i)
		}
		if schema.Type != "object" {
			return badf("", "tools.%d.input_schema.type: Input should be 'object'", i)
		}
	}

	seen := map[string]bool{} // every tool_use id so far
	var open []string         // tool_use ids of the previous assistant message
	for i, m := range req.messages {
		if m.Role != "user" && m.Role != "assistant" {
			return badf("", "messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if i == 0 && m.Role != "user" {
			return badf("", "messages: first message must use the \"user\" role")
		}
		if i > 0 && req.messages[i-1].Role == m.Role {
			return badf("", "messages: roles must alternate between \"user\" and \"assistant\", but found multiple %q roles in a row", m.Role)
		}
		if len(m.Content) == 0 {
			return badf("", "messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		var uses []string
		answered := map[string]bool{}
		for j, b := range m.Content {
			switch b.Type {
			case "text":
				if strings.TrimSpace(b.Text) == "" {
					return badf("", "messages.%d.content.%d.text: text content blocks must contain non-whitespace text", i, j)
				}
				if i == len(req.messages)-1 && m.Role == "assistant" && j == len(m.Content)-1 && strings.TrimRightFunc(b.Text, unicode.IsSpace) != b.Text {
					return badf("", "messages: final assistant content cannot end with trailing whitespace")
				}
			case "image":
				if m.Role != "user" {
					return badf("", "messages.%d.content.%d: image blocks are only allowed in user messages", i, j)
				}
				if why := checkImageBlock(b); why != "" {
					return badf("", "messages.%d.content.%d.image: %s", i, j, why)
				}
			case "thinking", "redacted_thinking":
				if m.Role != "assistant" {
					return badf("", "messages.%d.content.%d: thinking blocks are only allowed in assistant messages", i, j)
				}
			case "tool_use":
				switch {
				case m.Role != "assistant":
					return badf("", "messages.%d.content.%d: tool_use blocks are only allowed in assistant messages", i, j)
				case b.ID == "" || b.Name == "":
					return badf("", "messages.%d.content.%d: tool_use blocks need an id and a name", i, j)
				case !callID.MatchString(b.ID):
					return badf("", "messages.%d.content.%d.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'", i, j)
				case seen[b.ID]:
					return badf("", "messages.%d.content.%d: `tool_use` ids must be unique: %s", i, j, b.ID)
				case !isJSONObject(b.Input):
					return badf("", "messages.%d.content.%d.input: Input should be a valid dictionary", i, j)
				}
				seen[b.ID] = true
				uses = append(uses, b.ID)
			case "tool_result":
				switch {
				case m.Role != "user":
					return badf("", "messages.%d.content.%d: tool_result blocks are only allowed in user messages", i, j)
				case !callID.MatchString(b.ToolUseID):
					return badf("", "messages.%d.content.%d.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'", i, j)
				case !slices.Contains(open, b.ToolUseID) || answered[b.ToolUseID]:
					return badf("", "messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. "+
						"Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
				case j != len(answered):
					return badf("", "messages.%d.content.%d: `tool_result` blocks must come before any other content in the message", i, j)
				}
				if _, ok := anthropicText(b.Content); !ok {
					return badf("", "messages.%d.content.%d.content: Input should be a valid string or a list of content blocks", i, j)
				}
				var inner []AnthropicBlock
				_ = json.Unmarshal(b.Content, &inner) // a string holds no blocks
				for k, blk := range inner {
					switch blk.Type {
					case "text":
					case "image":
						if why := checkImageBlock(blk); why != "" {
							return badf("", "messages.%d.content.%d.content.%d.image: %s", i, j, k, why)
						}
					default:
						return badf("", "messages.%d.content.%d.content.%d.type: Input should be 'text' or 'image'", i, j, k)
					}
				}
				answered[b.ToolUseID] = true
			default:
				return badf("", "messages.%d.content.%d.type: unsupported content block type %q", i, j, b.Type)
			}
		}
		if missing := unanswered(open, answered); len(missing) > 0 {
			return badf("", "messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. "+
				"Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", "))
		}
		open = uses
	}
	if len(open) > 0 {
		return badf("", "messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. "+
			"Each `tool_use` block must have a corresponding `tool_result` block in the next message.", len(req.messages)-1, strings.Join(open, ", "))
	}
	return nil
}

// callID is what Anthropic takes as a tool_use id.
var callID = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

func unanswered(open []string, answered map[string]bool) []string {
	var missing []string
	for _, id := range open {
		if !answered[id] {
			missing = append(missing, id)
		}
	}
	return missing
}

// anthropicText reads a string, null, or a list of blocks whose text
// blocks are joined. ok is false for anything else.
func anthropicText(raw json.RawMessage) (string, bool) {
	if isNull(raw) {
		return "", true
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, true
	}
	var blocks []AnthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", false
	}
	var b strings.Builder
	for _, blk := range blocks {
		if blk.Type == "" {
			return "", false
		}
		b.WriteString(blk.Text)
	}
	return b.String(), true
}

// validateThinking checks the thinking blocks of a request against those
// the server sent, and what extended thinking wants of a request when
// thinking is on. s.mu is held.
func (s *AnthropicServer) validateThinking(req *anthropicRequest, thinking bool) *problem {
	for i, m := range req.messages {
		for j, b := range m.Content {
			switch b.Type {
			case "thinking":
				if text, ok := s.signed[b.Signature]; !ok || text != b.Thinking {
					return badf("", "messages.%d.content.%d: Invalid `signature` in `thinking` block", i, j)
				}
			case "redacted_thinking":
				if !s.redacted[b.Data] {
					return badf("", "messages.%d.content.%d: Invalid `data` in `redacted_thinking` block", i, j)
				}
			}
		}
	}
	if !thinking {
		return nil
	}
	n := len(req.messages)
	if last := req.messages[n-1]; last.Role == "assistant" {
		// A paused turn sent back starts with its thinking; a prefill
		// of the bot's own does not.
		if t := last.Content[0].Type; t != "thinking" && t != "redacted_thinking" {
			return badf("", "messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. "+
				"When `thinking` is enabled, a final `assistant` message must start with a thinking block.", n-1, t)
		}
	}
	// The tool loop in progress: the last user message answers the
	// calls of the assistant message before it.
	if n >= 2 {
		last, prev := req.messages[n-1], req.messages[n-2]
		if len(last.Content) > 0 && last.Content[0].Type == "tool_result" && len(prev.Content) > 0 {
			if t := prev.Content[0].Type; t != "thinking" && t != "redacted_thinking" {
				return badf("", "messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. "+
					"When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). "+
					"We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`.", n-2, t)
			}
		}
	}
	return nil
}

// thinkingBlocks are the thinking blocks a reply starts with when
// thinking is on: the scripted reply's Thinking, or one of the
// server's own. The server signs them (a thinking block scripted with a
// signature keeps it) and remembers them, to check them when they come
// back. s.mu is held.
func (s *AnthropicServer) thinkingBlocks(n int, reply llm.Message) []map[string]any {
	kept := reply.Thinking
	if len(kept) == 0 {
		kept = []llm.Thinking{{Type: llm.ThinkingBlock, Text: fmt.Sprintf("llmtest: thinking about request %d.", n)}}
	}
	var out []map[string]any
	for _, t := range kept {
		if t.Type == llm.RedactedThinkingBlock {
			s.redacted[t.Data] = true
			out = append(out, map[string]any{"type": "redacted_thinking", "data": t.Data})
			continue
		}
		sig := t.Signature
		if sig == "" {
			sum := sha256.Sum256([]byte(t.Text))
			sig = "EqQBllmtest" + base64.StdEncoding.EncodeToString(sum[:18])
		}
		s.signed[sig] = t.Text
		out = append(out, map[string]any{"type": "thinking", "thinking": t.Text, "signature": sig})
	}
	return out
}

func anthropicResponse(n int, model string, reply llm.Message) map[string]any {
	content := []map[string]any{}
	if reply.Content != "" {
		content = append(content, map[string]any{"type": "text", "text": reply.Content})
	}
	stop := "end_turn"
	for i, c := range reply.ToolCalls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("toolu_llmtest_%d_%d", n, i)
		}
		content = append(content, map[string]any{"type": "tool_use", "id": id, "name": c.Name, "input": json.RawMessage(c.Arguments)})
		stop = "tool_use"
	}
	switch reply.Stop {
	case llm.StopPaused:
		stop = "pause_turn"
	case llm.StopRefused:
		stop = "refusal"
	case llm.StopCutOff:
		stop = "max_tokens"
	}
	return map[string]any{
		"id":            fmt.Sprintf("msg_llmtest_%d", n),
		"type":          "message",
		"role":          "assistant",
		"model":         model,
		"content":       content,
		"stop_reason":   stop,
		"stop_sequence": nil,
		"usage":         map[string]int{"input_tokens": 0, "output_tokens": 0},
	}
}

// anthropicError writes Anthropic's error shape:
// {"type": "error", "error": {"type", "message"}}.
func anthropicError(w http.ResponseWriter, status int, msg string) {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == 529:
		typ = "overloaded_error"
	case status >= 500:
		typ = "api_error"
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}
