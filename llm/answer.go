package llm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// Reading the answer.
//
// langchaingo builds the requests, but the clients read the answers
// themselves: langchaingo v0.1.14 drops stop reasons and OpenAI's refusal
// field, returns a stream that breaks off (an error event, no [DONE] or
// message_stop) as a successful partial answer, and assembles streamed
// tool calls without their index. So the HTTP layer hands a 200 answer to
// the exchange of its request (carried in the request's context from
// generate, for that one request), which reads it — JSON or server-sent
// events — and keeps the reply or the error for generate to return;
// langchaingo is told the answer was taken and its own result is unused.
//
// What is read:
//   - text, told to the stream's TextFunc as it grows;
//   - tool calls, assembled by their index (OpenAI) or content block
//     (Anthropic). Metadata repeated in a later delta (vLLM sends the id
//     and name again) is ignored; deltas of several calls may interleave;
//     arguments sent as a JSON object instead of a string (llama-server)
//     are taken as they are;
//   - the stop reason: an answer cut off at the length limit, or by a
//     conversation that filled the context window, says so in its text
//     and its last call, if it was being written, is marked Truncated
//     (the agent answers it with an error, never runs it);
//     a content filter and a refusal are said in words, and stop a call
//     being written just the same;
//   - errors: an error object inside the answer, an OpenAI stream without
//     [DONE] (or a finish reason) and an Anthropic stream without
//     message_stop are a *StreamError, transient like the HTTP status
//     they stand for (an overload is retried, a bad request is not).

// The words added to a reply whose model did not simply finish. They are
// plain text; front ends escape them like any of the model's text.
const (
	NoteCutOff = "(This answer was cut off: the model reached its length limit.)"
	// NoteContextFull ends an answer cut off because the conversation
	// filled the model's context window: asking again cannot help.
	NoteContextFull = "(This answer was cut off: this conversation has filled the model's context window. Start a new thread to go on.)"
	NoteFiltered    = "(The provider's content filter withheld this answer.)"
	NoteRefused     = "(The model declined to answer this request.)"
	// NoteRetrying is shown after the partial text of a streamed answer
	// that broke off, while the request is sent again; the retried
	// answer replaces it.
	NoteRetrying = "(The answer was interrupted; asking the model again…)"
	// NoteInterrupted ends the partial text of a streamed answer that
	// broke off for good.
	NoteInterrupted = "(The answer was interrupted.)"
	// NotePaused ends an answer Anthropic paused (stop_reason
	// "pause_turn") and did not finish when asked to go on.
	NotePaused = "(The model paused this answer and did not finish it.)"
)

// Stop says why a model stopped writing its reply, when it did not
// simply finish. The values are stable JSON: checkpoints store them.
type Stop string

// The stops.
const (
	// StopCutOff: the reply reached the length limit (OpenAI's
	// finish_reason "length", Anthropic's stop_reason "max_tokens").
	StopCutOff Stop = "cut_off"
	// StopContextFull: the conversation filled the model's context
	// window while the reply was written (Anthropic's stop_reason
	// "model_context_window_exceeded"). Unlike StopCutOff it is not
	// continued: a continuation would not fit either.
	StopContextFull Stop = "context_full"
	// StopFiltered: the provider's content filter withheld (part of) the
	// reply.
	StopFiltered Stop = "content_filter"
	// StopRefused: the model declined to answer.
	StopRefused Stop = "refused"
	// StopPaused: Anthropic paused a long turn (stop_reason
	// "pause_turn"), to be continued by sending the reply back. A reply
	// that keeps it was not finished.
	StopPaused Stop = "paused"
)

// ErrOutOfQuota is matched (errors.Is) by the error of a provider that
// says the account has no quota or credit left. It is not retried.
var ErrOutOfQuota = errors.New("the model provider's account is out of quota")

// StreamError is a failure inside an answer that came with HTTP status
// 200: an error object or event in it, or a stream that ended before its
// end. It is transient like the HTTP error it stands for.
type StreamError struct {
	// Type is the provider's error type or code, e.g.
	// "overloaded_error", "server_error", "insufficient_quota"; empty for
	// a stream cut short.
	Type string
	// Message is the provider's message, if any.
	Message string
	// Cut: the stream ended without its terminator.
	Cut bool
}

func (e *StreamError) Error() string {
	switch {
	case e.Cut:
		return "the answer broke off before its end"
	case e.Type == "overloaded_error":
		return "the provider is overloaded: " + e.Message
	case e.quota():
		return ErrOutOfQuota.Error() + ": " + e.Message
	case e.Type == "":
		return "error in the answer: " + e.Message
	}
	return fmt.Sprintf("error in the answer (%s): %s", e.Type, e.Message)
}

// Transient: a cut stream, an overload, a rate limit or a server error
// may pass; a request, key or quota problem will not.
func (e *StreamError) Transient() bool {
	if e.Cut {
		return true
	}
	switch e.Type {
	case "invalid_request_error", "authentication_error", "permission_error", "not_found_error",
		"request_too_large", "invalid_api_key", "billing_error", "context_length_exceeded":
		return false
	}
	return !e.quota()
}

// Final: the conversation is too long for the model, or too large for
// the provider, every time it is sent (see StatusError.Final).
func (e *StreamError) Final() bool {
	return e.Type == "context_length_exceeded" || e.Type == "request_too_large"
}

// Is matches ErrOutOfQuota for a quota error.
func (e *StreamError) Is(target error) bool { return target == ErrOutOfQuota && e.quota() }

func (e *StreamError) quota() bool { return isQuota(e.Type) }

func isQuota(typ string) bool { return typ == "insufficient_quota" || typ == "billing_error" }

// toolUseFailed is the code of Groq's refusal of a reply whose tool call
// the model wrote wrong ("Failed to call a function. Please adjust your
// prompt."), an HTTP 400 or an error event in a stream. Another sample
// may come out right, so it is transient, as a model's broken call is
// something the model may do better.
const toolUseFailed = "tool_use_failed"

// errAnswerRead is what the HTTP layer tells langchaingo when the
// exchange has read the answer itself.
var errAnswerRead = errors.New("answer read by the model client")

// maxAnswer bounds a JSON answer and one server-sent event.
const maxAnswer = 32 << 20

type provider int

const (
	openAIProvider provider = iota + 1
	anthropicProvider
)

// exchange is one model request on its way through langchaingo: what the
// HTTP layer needs to adjust the request, and the answer it read.
type exchange struct {
	provider provider
	fn       TextFunc // nil: not streaming
	position int      // the reply's index in the conversation
	// used are the call IDs of the conversation so far: a reply's call
	// that repeats one gets an ID of its own (see message).
	used map[string]bool
	// developer are instructions to send as developer messages (OpenAI's
	// reasoning models; see toOpenAI).
	developer []string
	// errorResults are the tool call IDs of results that report a
	// failure (Anthropic's is_error).
	errorResults map[string]bool
	// images are the images of tool results to send, by the ID of their
	// call as sent (Anthropic: see addImages).
	images map[string][]Image
	// thinking are the thinking blocks to put into an Anthropic request
	// (see thinkingMarks).
	thinking *thinkingMarks

	read  bool
	reply Message
	err   error
}

type exchangeKey struct{}

func withExchange(ctx context.Context, x *exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, x)
}

func exchangeFrom(ctx context.Context) *exchange {
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	return x
}

// readAnswer reads a 200 answer and closes its body.
func (x *exchange) readAnswer(ctx context.Context, resp *http.Response) {
	defer resp.Body.Close()
	x.read = true
	a := newAnswer(x.provider)
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "text/event-stream" {
		x.err = readEvents(resp.Body, func(data []byte) error {
			if err := a.event(data); err != nil {
				return err
			}
			if a.textChanged && x.fn != nil {
				a.textChanged = false
				return x.fn(ctx, a.text.String())
			}
			return nil
		})
		if x.err == nil && !a.complete() {
			x.err = &StreamError{Cut: true}
		}
	} else {
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		if err != nil {
			x.err = err
			return
		}
		if x.err = a.whole(body); x.err == nil && x.fn != nil && a.text.Len() > 0 {
			x.err = x.fn(ctx, a.text.String())
		}
	}
	if x.err == nil {
		x.reply = a.message(x.position, x.used)
	}
}

// errEnd stops readEvents at a stream's terminator.
var errEnd = errors.New("end of stream")

// readEvents calls fn with the data of each server-sent event of r until
// r ends or fn returns an error (errEnd: the stream is complete).
func readEvents(r io.Reader, fn func(data []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data bytes.Buffer
	hasData := false
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: read the rest of it.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(long) < maxAnswer {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) > 0 {
			l := bytes.TrimRight(line, "\r\n")
			switch {
			case len(l) == 0:
				if hasData {
					if ferr := fn(data.Bytes()); ferr != nil {
						if errors.Is(ferr, errEnd) {
							return nil
						}
						return ferr
					}
				}
				data.Reset()
				hasData = false
			case bytes.HasPrefix(l, []byte("data:")):
				v := bytes.TrimPrefix(l[5:], []byte(" "))
				if hasData {
					data.WriteByte('\n')
				}
				data.Write(v)
				hasData = true
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if hasData {
					// The last event had no blank line after it.
					if ferr := fn(data.Bytes()); ferr != nil && !errors.Is(ferr, errEnd) {
						return ferr
					}
				}
				return nil
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				return &StreamError{Type: "too_large", Message: "an event of the answer is too large"}
			}
			return err
		}
	}
}

// answer accumulates a reply as it is read.
type answer struct {
	provider    provider
	text        strings.Builder
	textChanged bool
	refusal     strings.Builder
	calls       []*callParts
	byIndex     map[int]*callParts
	lastBlock   string // Anthropic: the type of the last content block
	// thinking are Anthropic's thinking and redacted_thinking blocks,
	// in order, and thinkingAt the one each content block index holds.
	thinking   []*Thinking
	thinkingAt map[int]*Thinking
	stop       string // the provider's stop reason, as sent
	usage      Usage
	done       bool // the terminator was seen
}

// callParts is a tool call being assembled.
type callParts struct {
	id, name string
	args     strings.Builder
	object   bool // arguments came as a JSON value, not a string
	open     bool // Anthropic: the block has not stopped yet
}

func newAnswer(p provider) *answer {
	return &answer{provider: p, byIndex: map[int]*callParts{}, thinkingAt: map[int]*Thinking{}}
}

// addThinking keeps a thinking or redacted_thinking block that starts
// at content block index.
func (a *answer) addThinking(index int, b *anthropicBlock) {
	t := &Thinking{Type: b.Type, Text: b.Thinking, Signature: b.Signature, Data: b.Data}
	a.thinking = append(a.thinking, t)
	a.thinkingAt[index] = t
}

func (a *answer) complete() bool {
	// An OpenAI-compatible server that closes the stream right after
	// the finish reason, without [DONE], has sent everything.
	return a.done || (a.provider == openAIProvider && a.stop != "")
}

func (a *answer) event(data []byte) error {
	if a.provider == anthropicProvider {
		return a.anthropicEvent(data)
	}
	return a.openAIChunk(data)
}

func (a *answer) whole(body []byte) error {
	if a.provider == anthropicProvider {
		return a.anthropicMessage(body)
	}
	return a.openAICompletion(body)
}

func (a *answer) addText(s string) {
	if s != "" {
		a.text.WriteString(s)
		a.textChanged = true
	}
}

// call returns the call at index, creating it after the others.
func (a *answer) call(index int) *callParts {
	c, ok := a.byIndex[index]
	if !ok {
		c = &callParts{}
		a.byIndex[index] = c
		a.calls = append(a.calls, c)
	}
	return c
}

// addArguments adds a piece of arguments: the text of a JSON string, or
// a whole JSON value that replaces what came before.
func (c *callParts) addArguments(raw json.RawMessage) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if c.object {
			return
		}
		c.args.WriteString(s)
		return
	}
	c.args.Reset()
	c.args.Write(raw)
	c.object = true
}

// providerError is the error object both providers send.
type providerError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
	// Param is the request parameter OpenAI refused, if any.
	Param json.RawMessage `json:"param"`
}

// errorBody is where an OpenAI-compatible server puts an error: OpenAI,
// llama-server, LiteLLM and Ollama as OpenAI does ({"error": {"message",
// "type", "code"}}); text-generation-inference as text ({"error": "…",
// "error_type": "…"}); vLLM before 0.10 and SGLang at the top level
// ({"object": "error", "message", "type", "code"}).
type errorBody struct {
	Error     json.RawMessage `json:"error"`
	ErrorType string          `json:"error_type"`
	Object    string          `json:"object"`
	Message   json.RawMessage `json:"message"`
	Type      string          `json:"type"`
	Code      json.RawMessage `json:"code"`
}

// providerError is the error the body holds, or nil.
func (b *errorBody) providerError() *providerError {
	if raw := bytes.TrimSpace(b.Error); len(raw) > 0 && string(raw) != "null" {
		var e providerError
		if json.Unmarshal(raw, &e) == nil {
			return &e
		}
		var text string
		if json.Unmarshal(raw, &text) == nil && text != "" {
			return &providerError{Message: text, Type: b.ErrorType}
		}
	}
	if msg := messageText(b.Message); b.Object == "error" && msg != "" {
		return &providerError{Message: msg, Type: b.Type, Code: b.Code}
	}
	return nil
}

// messageText reads an error message: text, or the list of a validation
// error's details (Mistral's {"detail": [{"loc": [...], "msg": …}]}),
// else the JSON as it is.
func messageText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text
	}
	var v struct {
		Detail []struct {
			Loc []any  `json:"loc"`
			Msg string `json:"msg"`
		} `json:"detail"`
	}
	if json.Unmarshal(raw, &v) == nil && len(v.Detail) > 0 {
		var parts []string
		for _, d := range v.Detail {
			var loc []string
			for _, l := range d.Loc {
				loc = append(loc, fmt.Sprint(l))
			}
			parts = append(parts, strings.Join(loc, ".")+": "+d.Msg)
		}
		return strings.Join(parts, "; ")
	}
	var compact bytes.Buffer
	if json.Compact(&compact, raw) != nil {
		return ""
	}
	return compact.String()
}

func (e *providerError) streamError() *StreamError {
	typ := e.Type
	var code string
	if json.Unmarshal(e.Code, &code) == nil && code != "" && (typ == "" || isQuota(code) || code == toolUseFailed || typ == "error") {
		typ = code
	}
	return &StreamError{Type: typ, Message: truncate(e.Message, 300)}
}

// OpenAI's answers.

type openAICall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type openAIUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

type openAIPart struct {
	Content json.RawMessage `json:"content"`
	Refusal *string         `json:"refusal"`
	Calls   []openAICall    `json:"tool_calls"`
}

type openAIBody struct {
	errorBody
	Choices []struct {
		Index        int         `json:"index"`
		Message      *openAIPart `json:"message"`
		Delta        *openAIPart `json:"delta"`
		FinishReason *string     `json:"finish_reason"`
	} `json:"choices"`
	Usage *openAIUsage `json:"usage"`
}

func (a *answer) openAIChunk(data []byte) error {
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		a.done = true
		return errEnd
	}
	var b openAIBody
	if json.Unmarshal(data, &b) != nil {
		return nil // not JSON (a keep-alive of some servers): nothing to read
	}
	if e := b.providerError(); e != nil {
		return e.streamError()
	}
	a.openAIUsage(b.Usage)
	for _, ch := range b.Choices {
		if ch.Index != 0 {
			continue
		}
		if d := ch.Delta; d != nil {
			a.addText(openAIContent(d.Content))
			if d.Refusal != nil {
				a.refusal.WriteString(*d.Refusal)
			}
			for _, dc := range d.Calls {
				c := a.openAIDeltaCall(dc)
				if c.id == "" {
					c.id = dc.ID
				}
				if c.name == "" {
					c.name = dc.Function.Name
				}
				c.addArguments(dc.Function.Arguments)
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			a.stop = *ch.FinishReason
		}
	}
	return nil
}

// openAIDeltaCall finds the call a delta belongs to: by its index, or,
// from a server that sends none, by its id (a new id is a new call; no
// id continues the last call, unless it names a new one).
func (a *answer) openAIDeltaCall(dc openAICall) *callParts {
	if dc.Index != nil {
		return a.call(*dc.Index)
	}
	if dc.ID != "" {
		for _, c := range a.calls {
			if c.id == dc.ID {
				return c
			}
		}
		return a.call(-1 - len(a.calls))
	}
	if n := len(a.calls); n > 0 {
		last := a.calls[n-1]
		// Several calls in one chunk, or one after the other, from a
		// server that numbers them no more than it names them: a name
		// after a call that has its name and whole arguments is the
		// next call's.
		if dc.Function.Name == "" || last.name == "" || !json.Valid([]byte(last.args.String())) {
			return last
		}
	}
	return a.call(-1 - len(a.calls))
}

func (a *answer) openAIUsage(u *openAIUsage) {
	if u != nil && (u.PromptTokens > 0 || u.CompletionTokens > 0) {
		a.usage = Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
	}
}

// openAIContent reads message content: a string, null, or a list of
// parts whose text is joined.
func openAIContent(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts) // anything else has no text
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func (a *answer) openAICompletion(body []byte) error {
	var b openAIBody
	if err := json.Unmarshal(body, &b); err != nil {
		return &StreamError{Type: "malformed", Message: "the answer is not JSON"}
	}
	if e := b.providerError(); e != nil {
		return e.streamError()
	}
	a.openAIUsage(b.Usage)
	a.done = true
	for _, ch := range b.Choices {
		if ch.Index != 0 || ch.Message == nil {
			continue
		}
		m := ch.Message
		a.addText(openAIContent(m.Content))
		if m.Refusal != nil {
			a.refusal.WriteString(*m.Refusal)
		}
		for i, mc := range m.Calls {
			c := a.call(i)
			c.id, c.name = mc.ID, mc.Function.Name
			c.addArguments(mc.Function.Arguments)
		}
		if ch.FinishReason != nil {
			a.stop = *ch.FinishReason
		}
		return nil
	}
	return &StreamError{Type: "malformed", Message: "the answer has no choice"}
}

// Anthropic's answers.

type anthropicBlock struct {
	Type  string          `json:"type"`
	Text  string          `json:"text"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// Thinking and Signature of a thinking block, Data of a
	// redacted_thinking block.
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
	Data      string `json:"data"`
}

type anthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

func (a *answer) anthropicUsage(u *anthropicUsage) {
	if u == nil {
		return
	}
	if u.InputTokens > 0 {
		a.usage.Input = u.InputTokens
	}
	if u.OutputTokens > 0 {
		a.usage.Output = u.OutputTokens
	}
}

func (a *answer) anthropicEvent(data []byte) error {
	var e struct {
		Type         string          `json:"type"`
		Index        int             `json:"index"`
		ContentBlock *anthropicBlock `json:"content_block"`
		Delta        struct {
			Type        string          `json:"type"`
			Text        string          `json:"text"`
			Thinking    string          `json:"thinking"`
			Signature   string          `json:"signature"`
			PartialJSON json.RawMessage `json:"partial_json"`
			StopReason  *string         `json:"stop_reason"`
		} `json:"delta"`
		Message *struct {
			Usage *anthropicUsage `json:"usage"`
		} `json:"message"`
		Usage *anthropicUsage `json:"usage"`
		Error *providerError  `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil {
		return nil
	}
	switch e.Type {
	case "error":
		if e.Error == nil {
			return &StreamError{Type: "api_error", Message: "an error event without details"}
		}
		return e.Error.streamError()
	case "message_start":
		if e.Message != nil {
			a.anthropicUsage(e.Message.Usage)
		}
	case "content_block_start":
		if e.ContentBlock == nil {
			return nil
		}
		a.lastBlock = e.ContentBlock.Type
		switch e.ContentBlock.Type {
		case "text":
			a.addText(e.ContentBlock.Text)
		case "tool_use":
			c := a.call(e.Index)
			c.id, c.name, c.open = e.ContentBlock.ID, e.ContentBlock.Name, true
		case ThinkingBlock, RedactedThinkingBlock:
			a.addThinking(e.Index, e.ContentBlock)
		}
	case "content_block_delta":
		switch e.Delta.Type {
		case "text_delta":
			a.addText(e.Delta.Text)
		case "thinking_delta":
			// The model's working: kept to be sent back, never
			// shown as the answer.
			if t, ok := a.thinkingAt[e.Index]; ok && t.Type == ThinkingBlock {
				t.Text += e.Delta.Thinking
			}
		case "signature_delta":
			if t, ok := a.thinkingAt[e.Index]; ok && t.Type == ThinkingBlock {
				t.Signature += e.Delta.Signature
			}
		case "input_json_delta":
			if c, ok := a.byIndex[e.Index]; ok {
				c.addArguments(e.Delta.PartialJSON)
			}
		}
	case "content_block_stop":
		if c, ok := a.byIndex[e.Index]; ok {
			c.open = false
		}
	case "message_delta":
		if e.Delta.StopReason != nil {
			a.stop = *e.Delta.StopReason
		}
		a.anthropicUsage(e.Usage)
	case "message_stop":
		a.done = true
		return errEnd
	}
	return nil
}

func (a *answer) anthropicMessage(body []byte) error {
	var m struct {
		Type       string           `json:"type"`
		Content    []anthropicBlock `json:"content"`
		StopReason string           `json:"stop_reason"`
		Usage      *anthropicUsage  `json:"usage"`
		Error      *providerError   `json:"error"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return &StreamError{Type: "malformed", Message: "the answer is not JSON"}
	}
	if m.Error != nil {
		return m.Error.streamError()
	}
	a.done = true
	a.stop = m.StopReason
	a.anthropicUsage(m.Usage)
	for i, b := range m.Content {
		a.lastBlock = b.Type
		switch b.Type {
		case "text":
			a.addText(b.Text)
		case "tool_use":
			c := a.call(i)
			c.id, c.name = b.ID, b.Name
			c.addArguments(b.Input)
		case ThinkingBlock, RedactedThinkingBlock:
			a.addThinking(i, &m.Content[i])
		}
	}
	return nil
}

// message is the reply read. position is its index in the
// conversation, used the call IDs the conversation has already.
//
// A call whose ID is already taken — by an earlier call of the
// conversation, or of the same reply — gets one made up as for a call
// without an ID: some servers give every call of a reply the same ID
// (Xinference), or start again at each request (text-generation-inference
// sends "0"), and a conversation with two calls of one ID is refused by
// Anthropic and OpenAI, and would pair a result with the wrong call.
func (a *answer) message(position int, used map[string]bool) Message {
	reply := Message{Role: RoleAssistant, Content: a.text.String()}
	if a.usage != (Usage{}) {
		u := a.usage
		reply.Usage = &u
	}
	for _, t := range a.thinking {
		// A thinking block cut off before its signature (the length
		// limit came while the model thought) cannot be sent back:
		// Anthropic refuses it, and it led to no call.
		if (t.Type == ThinkingBlock && t.Signature == "") || (t.Type == RedactedThinkingBlock && t.Data == "") {
			continue
		}
		reply.Thinking = append(reply.Thinking, *t)
	}
	taken := map[string]bool{} // the IDs of this reply's calls
	for i, c := range a.calls {
		if c.name == "" && c.args.Len() == 0 {
			continue // nothing of a call arrived
		}
		id := c.id
		if used[id] || taken[id] {
			id = ""
		}
		tc := replyToolCall(id, c.name, c.args.String(), position, i)
		taken[tc.ID] = true
		if c.name == "" {
			tc.Name = "unnamed_call"
		}
		tc.Truncated = c.open
		reply.ToolCalls = append(reply.ToolCalls, tc)
	}
	note := func(n string) {
		if strings.TrimSpace(reply.Content) == "" {
			reply.Content = n
			return
		}
		reply.Content = strings.TrimRight(reply.Content, " \n") + "\n\n" + n
	}
	switch a.stop {
	case "length", "max_tokens":
		reply.Stop = StopCutOff
		// The call being written when the limit came is cut off.
		if n := len(reply.ToolCalls); n > 0 && (a.provider == openAIProvider || a.lastBlock == "tool_use") {
			reply.ToolCalls[n-1].Truncated = true
		}
		note(NoteCutOff)
	case "pause_turn":
		// Not an end: Anthropic goes on when given the reply back
		// (see Anthropic.generate).
		reply.Stop = StopPaused
	case "model_context_window_exceeded":
		reply.Stop = StopContextFull
		if n := len(reply.ToolCalls); n > 0 && a.lastBlock == "tool_use" {
			reply.ToolCalls[n-1].Truncated = true
		}
		note(NoteContextFull)
	case "content_filter":
		reply.Stop = StopFiltered
		// The call being written when the filter stopped the reply is
		// cut off: what arrived of it may parse, yet it is not the call.
		if n := len(reply.ToolCalls); n > 0 {
			reply.ToolCalls[n-1].Truncated = true
		}
		note(NoteFiltered)
	case "refusal":
		reply.Stop = StopRefused
		// Likewise the call being written when the model stopped to
		// refuse.
		if n := len(reply.ToolCalls); n > 0 && a.lastBlock == "tool_use" {
			reply.ToolCalls[n-1].Truncated = true
		}
		note(NoteRefused)
	}
	if r := strings.TrimSpace(a.refusal.String()); r != "" {
		reply.Stop = StopRefused
		if strings.TrimSpace(reply.Content) == "" || reply.Content == NoteRefused {
			reply.Content = r
		} else {
			reply.Content = strings.TrimRight(reply.Content, " \n") + "\n\n" + r
		}
	}
	for _, tc := range reply.ToolCalls {
		if tc.Truncated {
			if reply.Stop == "" {
				reply.Stop = StopCutOff
				note(NoteCutOff)
			}
			break
		}
	}
	return reply
}

// madeUpCallID is the ID of a call a server sent without one: nine
// letters and digits (Mistral's templates take nothing else), derived
// from the call's place in the conversation so that it is the same on
// every replay.
func madeUpCallID(position, index int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	sum := sha256.Sum256([]byte(fmt.Sprintf("call %d %d", position, index)))
	id := make([]byte, 9)
	for i := range id {
		id[i] = alphabet[int(sum[i])%len(alphabet)]
	}
	return string(id)
}
