package llmtest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/llm"
)

// OpenAIServer is a local server that speaks OpenAI's chat completions
// API (POST /v1/chat/completions; /chat/completions is accepted too): a
// JSON reply, or server-sent chat.completion.chunk events when the request
// asks for "stream": true. It answers from a script of replies and
// records every request. Before answering, it checks a request the way the real API
// does where converters go wrong, and answers HTTP 400 with OpenAI's error
// JSON when:
//
//   - a message has an unknown role, or content that is neither text nor
//     a list of content parts;
//   - a message other than a user message has a part that is not text
//     (a tool message holds text only), or a user message's image_url
//     part is not a data: URL of a PNG, JPEG, GIF or WebP image whose
//     bytes are of the type it names (code invalid_image_format);
//   - an assistant message's tool call has no id, an id longer than 40
//     characters (code string_above_max_length), a type other than
//     "function", no function name, or arguments that are not a string;
//   - the tool calls of an assistant message are not each answered by a
//     tool message with that tool_call_id before the next non-tool
//     message (or the end of the conversation);
//   - a tool message does not answer a pending call of the assistant
//     message before it;
//   - a tool is not {"type":"function"} with a valid name and an object
//     schema, or its parameters (or an object schema inside them) have no
//     "properties" (code invalid_function_parameters, as OpenAI answers
//     {"type":"object"});
//   - "temperature" is sent for a reasoning model (o1, o3, o4-mini, gpt-5
//     families), which take only their default (code unsupported_value),
//     or top_p, a penalty or max_tokens (code unsupported_parameter), or
//     reasoning_effort for another model (code unsupported_parameter).
type OpenAIServer struct {
	srv    *httptest.Server
	script script

	mu        sync.Mutex
	requests  []OpenAIRequest
	usage     [2]int // prompt and completion tokens each reply reports
	reasoning map[string]bool
	// textOnly are the models that take no images (TakesNoImages).
	textOnly map[string]bool
	// mistral: answer as Mistral's API does where it differs.
	mistral bool
}

// TakesNoImages makes the server refuse an image_url part for these
// models, as OpenAI does for a model without vision (gpt-3.5-turbo):
// HTTP 400, "Invalid content type. image_url is only supported by
// certain models.", naming the part's type as the param.
func (s *OpenAIServer) TakesNoImages(models ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.textOnly == nil {
		s.textOnly = map[string]bool{}
	}
	for _, m := range models {
		s.textOnly[m] = true
	}
}

// imageRefusal is the problem of a request with an image for a model
// that takes none, or nil.
func (s *OpenAIServer) imageRefusal(req *openAIWireRequest) *problem {
	s.mu.Lock()
	textOnly := s.textOnly[req.Model]
	s.mu.Unlock()
	if !textOnly {
		return nil
	}
	for i, m := range req.Messages {
		parts, _ := openAIParts(m.Content)
		for j, p := range parts {
			if p.Type == "image_url" {
				return badf(fmt.Sprintf("messages.[%d].content.[%d].type", i, j), "Invalid content type. image_url is only supported by certain models.")
			}
		}
	}
	return nil
}

// ActAsMistral makes the server refuse what Mistral's API refuses of an
// OpenAI request: stream_options (HTTP 422, "Extra inputs are not
// permitted"), and a tool call ID other than nine letters and digits
// (HTTP 400, "Tool call id was … but must be a-z, A-Z, 0-9, with a
// length of 9.").
func (s *OpenAIServer) ActAsMistral() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mistral = true
}

var mistralCallID = regexp.MustCompile(`^[a-zA-Z0-9]{9}$`)

// mistralProblem is what Mistral's API refuses in req, or "".
func mistralProblem(req *openAIWireRequest) string {
	for _, m := range req.Messages {
		for _, c := range m.ToolCalls {
			if !mistralCallID.MatchString(c.ID) {
				return fmt.Sprintf("Tool call id was %s but must be a-z, A-Z, 0-9, with a length of 9.", c.ID)
			}
		}
		if m.Role == "tool" && !mistralCallID.MatchString(m.ToolCallID) {
			return fmt.Sprintf("Tool call id was %s but must be a-z, A-Z, 0-9, with a length of 9.", m.ToolCallID)
		}
	}
	return ""
}

// mistralExtraForbidden is Mistral's answer to a request with a field it
// does not have.
const mistralExtraForbidden = `{"object":"error","message":{"detail":[{"type":"extra_forbidden","loc":["body","stream_options","include_usage"],` +
	`"msg":"Extra inputs are not permitted","input":true}]},"type":"invalid_request_error","param":null,"code":null}`

// Reasoning makes the server take these model names for reasoning models
// too, which refuse a temperature, as Azure OpenAI does with a deployment
// of one, named as its owner chose.
func (s *OpenAIServer) Reasoning(models ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reasoning == nil {
		s.reasoning = map[string]bool{}
	}
	for _, m := range models {
		s.reasoning[m] = true
	}
}

func (s *OpenAIServer) reasoningModel(model string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reasoning[model] || ReasoningModel(model)
}

// ReportUsage makes every reply report these token counts (0 by default).
func (s *OpenAIServer) ReportUsage(prompt, completion int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usage = [2]int{prompt, completion}
}

// OpenAIRequest is one request the server received.
type OpenAIRequest struct {
	Path   string
	Header http.Header
	// Body is the request body as received.
	Body     json.RawMessage
	Model    string
	Messages []OpenAIMessage
	Tools    []OpenAITool
	// Status is the HTTP status the server answered with.
	Status int
	// Problem is why the server answered 400, or "".
	Problem string
}

// OpenAIMessage is a message of a request, as sent.
type OpenAIMessage struct {
	Role string `json:"role"`
	// Content is a string, a list of content parts, or null.
	Content    json.RawMessage  `json:"content,omitempty"`
	Name       string           `json:"name,omitempty"`
	ToolCalls  []OpenAIToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

// Text returns the message's text: the content string, or its text parts
// joined.
func (m OpenAIMessage) Text() string {
	text, _ := openAIText(m.Content)
	return text
}

// Images returns the images of the message's image_url parts (data:
// URLs), in order.
func (m OpenAIMessage) Images() []llm.Image {
	parts, _ := openAIParts(m.Content)
	var out []llm.Image
	for _, p := range parts {
		if p.Type == "image_url" && p.ImageURL != nil {
			if img, why := dataURLImage(p.ImageURL.URL); why == "" {
				out = append(out, img)
			}
		}
	}
	return out
}

// OpenAIToolCall is a tool call of an assistant message.
type OpenAIToolCall struct {
	ID       string             `json:"id"`
	Type     string             `json:"type"`
	Function OpenAIFunctionCall `json:"function"`
}

// OpenAIFunctionCall is the function part of a tool call.
type OpenAIFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// OpenAITool is a tool offered in a request.
type OpenAITool struct {
	Type     string            `json:"type"`
	Function OpenAIFunctionDef `json:"function"`
}

// OpenAIFunctionDef describes an offered function.
type OpenAIFunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// NewOpenAIServer starts a server that answers with replies, in order,
// and stops it when the test ends. Point a client at URL().
func NewOpenAIServer(t testing.TB, replies ...llm.Message) *OpenAIServer {
	t.Helper()
	s := &OpenAIServer{}
	s.script.push(replies...)
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the base URL for a client, ending in /v1 (as OPENAI_BASE_URL).
func (s *OpenAIServer) URL() string { return s.srv.URL + "/v1" }

// Then appends replies to the script.
func (s *OpenAIServer) Then(replies ...llm.Message) { s.script.push(replies...) }

// ThenRaw appends raw answers to the script (see Raw).
func (s *OpenAIServer) ThenRaw(raws ...Raw) { s.script.pushRaw(raws...) }

// FailNext makes the next n requests fail with the HTTP status (e.g. 500
// or 429) before the script goes on.
func (s *OpenAIServer) FailNext(n, status int) { s.script.failNext(n, status) }

// Remaining is the number of scripted answers not used yet.
func (s *OpenAIServer) Remaining() int { return s.script.remaining() }

// Requests returns every request received so far, in order.
func (s *OpenAIServer) Requests() []OpenAIRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

func (s *OpenAIServer) record(r OpenAIRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
}

func (s *OpenAIServer) handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/chat/completions" {
		openAIError(w, http.StatusNotFound, "invalid_request_error", "", "Unknown request URL: "+r.Method+" "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		openAIError(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "Only POST is supported")
		return
	}
	body, err := readBody(r)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "", "read body: "+err.Error())
		return
	}
	rec := OpenAIRequest{Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	n, fail := s.script.begin()
	var req openAIWireRequest
	if err := json.Unmarshal(body, &req); err != nil {
		rec.Status, rec.Problem = http.StatusBadRequest, "We could not parse the JSON body of your request: "+err.Error()
		s.record(rec)
		openAIError(w, rec.Status, "invalid_request_error", "", rec.Problem)
		return
	}
	rec.Model, rec.Messages, rec.Tools = req.Model, req.Messages, req.Tools
	if fail != 0 {
		rec.Status = fail
		s.record(rec)
		openAIError(w, fail, openAIErrorType(fail), "", fmt.Sprintf("llmtest: scripted failure %d", fail))
		return
	}
	s.mu.Lock()
	mistral := s.mistral
	s.mu.Unlock()
	if mistral && req.StreamOptions != nil {
		rec.Status, rec.Problem = http.StatusUnprocessableEntity, "stream_options: Extra inputs are not permitted"
		s.record(rec)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.Status)
		_, _ = w.Write([]byte(mistralExtraForbidden))
		return
	}
	if p := mistralProblem(&req); mistral && p != "" {
		rec.Status, rec.Problem = http.StatusBadRequest, p
		s.record(rec)
		writeJSON(w, rec.Status, map[string]any{"object": "error", "message": p, "type": "invalid_function_call", "param": nil, "code": "3280"})
		return
	}
	p := validateOpenAI(&req, s.reasoningModel(req.Model))
	if p == nil {
		p = s.imageRefusal(&req)
	}
	if p != nil {
		rec.Status, rec.Problem = http.StatusBadRequest, p.msg
		s.record(rec)
		openAIErrorCode(w, rec.Status, "invalid_request_error", p.param, p.code, p.msg)
		return
	}
	reply, raw, ok := s.script.take()
	if !ok {
		rec.Status, rec.Problem = http.StatusBadRequest, exhausted(n)
		s.record(rec)
		openAIError(w, rec.Status, "invalid_request_error", "", rec.Problem)
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
	s.mu.Lock()
	usage := map[string]int{"prompt_tokens": s.usage[0], "completion_tokens": s.usage[1], "total_tokens": s.usage[0] + s.usage[1]}
	s.mu.Unlock()
	resp := openAIResponse(n, req.Model, reply)
	resp["usage"] = usage
	if req.Stream {
		s.streamOpenAI(w, n, req.Model, resp, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

type openAIWireRequest struct {
	Model    string          `json:"model"`
	Messages []OpenAIMessage `json:"messages"`
	Tools    []OpenAITool    `json:"tools"`
	Stream   bool            `json:"stream"`
	// Temperature is nil when the request has none.
	Temperature *float64 `json:"temperature"`
	// Sampling parameters and the old token limit, which reasoning
	// models refuse.
	TopP             *float64 `json:"top_p"`
	PresencePenalty  *float64 `json:"presence_penalty"`
	FrequencyPenalty *float64 `json:"frequency_penalty"`
	MaxTokens        *int     `json:"max_tokens"`
	// ReasoningEffort is for reasoning models only.
	ReasoningEffort *string `json:"reasoning_effort"`
	// StreamOptions asks for a last chunk with the usage.
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// maxOpenAICallID is the longest tool call id OpenAI takes back.
const maxOpenAICallID = 40

func validateOpenAI(req *openAIWireRequest, reasoning bool) *problem {
	if req.Model == "" {
		return badf("model", "Missing required parameter: 'model'.")
	}
	if len(req.Messages) == 0 {
		return badf("messages", "[] is too short - 'messages'")
	}
	for i, t := range req.Tools {
		if t.Type != "function" {
			return badf(fmt.Sprintf("tools[%d].type", i), "Invalid value: '%s'. Supported values are: 'function'.", t.Type)
		}
		if !functionName.MatchString(t.Function.Name) {
			return badf(fmt.Sprintf("tools[%d].function.name", i),
				"Invalid 'tools[%d].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i)
		}
		if len(t.Function.Parameters) > 0 && !isJSONObject(t.Function.Parameters) {
			return badf(fmt.Sprintf("tools[%d].function.parameters", i),
				"Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"'.", t.Function.Name)
		}
		if len(t.Function.Parameters) > 0 {
			if p := openAISchemaProblem(t.Function.Name, t.Function.Parameters); p != nil {
				p.param = fmt.Sprintf("tools[%d].function.parameters", i)
				return p
			}
		}
	}
	if reasoning {
		for name, set := range map[string]bool{"top_p": req.TopP != nil, "presence_penalty": req.PresencePenalty != nil,
			"frequency_penalty": req.FrequencyPenalty != nil} {
			if set {
				p := badf(name, "Unsupported parameter: '%s' is not supported with this model.", name)
				p.code = "unsupported_parameter"
				return p
			}
		}
		if req.MaxTokens != nil {
			p := badf("max_tokens", "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.")
			p.code = "unsupported_parameter"
			return p
		}
	}
	if req.ReasoningEffort != nil && !reasoning {
		p := badf("reasoning_effort", "Unsupported parameter: 'reasoning_effort' is not supported with this model.")
		p.code = "unsupported_parameter"
		return p
	}
	if req.Temperature != nil && reasoning && *req.Temperature != 1 {
		p := badf("temperature", "Unsupported value: 'temperature' does not support %v with this model. Only the default (1) value is supported.", *req.Temperature)
		p.code = "unsupported_value"
		return p
	}

	// pending holds the tool calls of the last assistant message that no
	// tool message has answered yet; from is that message's index.
	var pending []string
	from := -1
	seen := map[string]bool{}
	for i, m := range req.Messages {
		param := fmt.Sprintf("messages.[%d].role", i)
		if m.Role != "tool" && len(pending) > 0 {
			return badf(param, "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "+
				"The following tool_call_ids did not have response messages: %s", strings.Join(pending, ", "))
		}
		switch m.Role {
		case "system", "developer", "user":
			if _, ok := openAIText(m.Content); !ok || isNull(m.Content) {
				return badf(fmt.Sprintf("messages[%d].content", i), "Invalid value for 'messages[%d].content': expected a string or an array of content parts.", i)
			}
			parts, _ := openAIParts(m.Content)
			for j, p := range parts {
				if p.Type == "text" {
					continue
				}
				if p.Type != "image_url" || m.Role != "user" {
					supported := "'text'"
					if m.Role == "user" {
						supported = "'text' and 'image_url'"
					}
					return badf(fmt.Sprintf("messages[%d].content[%d].type", i, j), "Invalid value: '%s'. Supported values are: %s.", p.Type, supported)
				}
				if p.ImageURL == nil {
					return badf(fmt.Sprintf("messages[%d].content[%d].image_url", i, j), "Missing required parameter: 'messages[%d].content[%d].image_url'.", i, j)
				}
				if _, why := dataURLImage(p.ImageURL.URL); why != "" {
					p := badf(fmt.Sprintf("messages[%d].content[%d].image_url", i, j), "Invalid image: %s.", why)
					p.code = "invalid_image_format"
					return p
				}
			}
			if len(m.ToolCalls) > 0 || m.ToolCallID != "" {
				return badf(param, "Invalid parameter: only assistant messages may have 'tool_calls' and only tool messages a 'tool_call_id'.")
			}
		case "assistant":
			if _, ok := openAIText(m.Content); !ok || !onlyText(m.Content) {
				return badf(fmt.Sprintf("messages[%d].content", i), "Invalid value for 'messages[%d].content': expected a string, an array of content parts or null.", i)
			}
			if len(m.ToolCalls) == 0 && isNull(m.Content) {
				return badf(fmt.Sprintf("messages[%d].content", i), "Invalid value for 'messages[%d].content': content is required unless 'tool_calls' is specified.", i)
			}
			for j, c := range m.ToolCalls {
				switch {
				case c.ID == "":
					return badf(fmt.Sprintf("messages[%d].tool_calls[%d].id", i, j), "Missing required parameter: 'messages[%d].tool_calls[%d].id'.", i, j)
				case len(c.ID) > maxOpenAICallID:
					p := badf(fmt.Sprintf("messages[%d].tool_calls[%d].id", i, j), "Invalid 'messages[%d].tool_calls[%d].id': string too long. "+
						"Expected a string with maximum length %d, but got a string with length %d instead.", i, j, maxOpenAICallID, len(c.ID))
					p.code = "string_above_max_length"
					return p
				case c.Type != "function":
					return badf(fmt.Sprintf("messages[%d].tool_calls[%d].type", i, j), "Invalid value: '%s'. Supported values are: 'function'.", c.Type)
				case c.Function.Name == "":
					return badf(fmt.Sprintf("messages[%d].tool_calls[%d].function.name", i, j), "Missing required parameter: 'messages[%d].tool_calls[%d].function.name'.", i, j)
				case seen[c.ID]:
					return badf(fmt.Sprintf("messages[%d].tool_calls[%d].id", i, j), "Duplicate tool_call id '%s'.", c.ID)
				}
				seen[c.ID] = true
				pending = append(pending, c.ID)
			}
			from = i
		case "tool":
			k := slices.Index(pending, m.ToolCallID)
			if from < 0 || k < 0 {
				return badf(param, "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
			}
			if _, ok := openAIText(m.Content); !ok || isNull(m.Content) || !onlyText(m.Content) {
				return badf(fmt.Sprintf("messages[%d].content", i), "Invalid value for 'messages[%d].content': expected a string or an array of text parts.", i)
			}
			pending = slices.Delete(pending, k, k+1)
		default:
			return badf(param, "Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", m.Role)
		}
	}
	if len(pending) > 0 {
		return badf(fmt.Sprintf("messages.[%d].role", from), "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "+
			"The following tool_call_ids did not have response messages: %s", strings.Join(pending, ", "))
	}
	return nil
}

// openAIPart is a content part of a message.
type openAIPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

// openAIParts reads message content given as a list of parts; ok is
// false for anything else (a string, null).
func openAIParts(raw json.RawMessage) (parts []openAIPart, ok bool) {
	return parts, json.Unmarshal(raw, &parts) == nil
}

// onlyText reports whether message content is a string, null or a list
// of text parts: what other messages than the user's take.
func onlyText(raw json.RawMessage) bool {
	parts, _ := openAIParts(raw)
	for _, p := range parts {
		if p.Type != "text" {
			return false
		}
	}
	return true
}

// openAIText reads message content: a string, null, or a list of parts
// whose text parts are joined. ok is false for anything else.
func openAIText(raw json.RawMessage) (text string, ok bool) {
	if isNull(raw) {
		return "", true
	}
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, true
	}
	parts, ok := openAIParts(raw)
	if !ok {
		return "", false
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "" {
			return "", false
		}
		b.WriteString(p.Text)
	}
	return b.String(), true
}

func openAIResponse(n int, model string, reply llm.Message) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil}
	if reply.Content != "" || len(reply.ToolCalls) == 0 {
		msg["content"] = reply.Content
	}
	finish := "stop"
	if len(reply.ToolCalls) > 0 {
		calls := make([]OpenAIToolCall, len(reply.ToolCalls))
		for i, c := range reply.ToolCalls {
			id := c.ID
			if id == "" {
				id = fmt.Sprintf("call_%d_%d", n, i)
			}
			calls[i] = OpenAIToolCall{ID: id, Type: "function", Function: OpenAIFunctionCall{Name: c.Name, Arguments: c.Arguments}}
		}
		msg["tool_calls"] = calls
		finish = "tool_calls"
	}
	return map[string]any{
		"id":      fmt.Sprintf("chatcmpl-llmtest-%d", n),
		"object":  "chat.completion",
		"created": 1700000000,
		"model":   model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage":   map[string]int{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
	}
}

// openAIError writes OpenAI's error shape:
// {"error": {"message", "type", "param", "code"}}.
func openAIError(w http.ResponseWriter, status int, typ, param, msg string) {
	openAIErrorCode(w, status, typ, param, "", msg)
}

func openAIErrorCode(w http.ResponseWriter, status int, typ, param, code, msg string) {
	var p, c any
	if param != "" {
		p = param
	}
	if code != "" {
		c = code
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": c}})
}

// ReasoningModel reports whether OpenAI's model takes no sampling
// parameters (temperature other than its default): the o-series and
// gpt-5 families.
func ReasoningModel(model string) bool {
	m := strings.ToLower(model)
	if i := strings.LastIndex(m, "/"); i >= 0 {
		m = m[i+1:]
	}
	for _, p := range []string{"o1", "o3", "o4", "gpt-5"} {
		if m == p || strings.HasPrefix(m, p+"-") || strings.HasPrefix(m, p+".") {
			return true
		}
	}
	return false
}

// openAISchemaProblem finds what OpenAI refuses in function parameters:
// a top level that is not of type object, an object schema without
// properties.
func openAISchemaProblem(name string, params json.RawMessage) *problem {
	var schema map[string]any
	if json.Unmarshal(params, &schema) != nil {
		return nil
	}
	if t, _ := schema["type"].(string); t != "object" {
		p := badf("", "Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"%v\"'.", name, schema["type"])
		p.code = "invalid_function_parameters"
		return p
	}
	var walk func(s map[string]any, path string) *problem
	walk = func(s map[string]any, path string) *problem {
		if t, _ := s["type"].(string); t == "object" {
			if _, ok := s["properties"].(map[string]any); !ok {
				p := badf("", "Invalid schema for function '%s': In context=(%s), object schema missing properties.", name, path)
				p.code = "invalid_function_parameters"
				return p
			}
		}
		if props, ok := s["properties"].(map[string]any); ok {
			for k, v := range props {
				if sub, ok := v.(map[string]any); ok {
					if p := walk(sub, strings.TrimPrefix(path+", 'properties', '"+k+"'", ", ")); p != nil {
						return p
					}
				}
			}
		}
		if sub, ok := s["items"].(map[string]any); ok {
			return walk(sub, strings.TrimPrefix(path+", 'items'", ", "))
		}
		return nil
	}
	return walk(schema, "")
}

func openAIErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status == http.StatusUnauthorized:
		return "invalid_api_key"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

func isJSONObject(raw json.RawMessage) bool {
	var obj map[string]json.RawMessage
	return json.Unmarshal(raw, &obj) == nil && obj != nil
}
