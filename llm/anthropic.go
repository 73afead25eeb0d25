package llm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode"

	"github.com/sirupsen/logrus"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/anthropic"
)

// DefaultAnthropicModel is the model NewAnthropic uses when none is given.
const DefaultAnthropicModel = "claude-sonnet-4-5"

// DefaultAnthropicBaseURL is Anthropic's API.
const DefaultAnthropicBaseURL = "https://api.anthropic.com/v1"

// DefaultAnthropicMaxTokens is the reply length limit, which Anthropic's
// API requires on every request.
const DefaultAnthropicMaxTokens = 4096

// AnthropicOptions configure NewAnthropic.
type AnthropicOptions struct {
	// APIKey is sent as x-api-key. It may be empty when BaseURL points at
	// a proxy or test server that needs none; then no key header is sent.
	APIKey string
	// KeyName, if set, is where the key came from (an environment
	// variable), named in the error of a provider that refuses the key
	// (HTTP 401), so that whoever reads it knows what to fix.
	KeyName string
	// BaseURL is the API root, as for Anthropic's own SDKs: with or
	// without the trailing /v1 (it is added when missing).
	// Default DefaultAnthropicBaseURL.
	BaseURL string
	// Model defaults to DefaultAnthropicModel.
	Model string
	// HTTPClient defaults to a client with DefaultHTTPTimeout.
	HTTPClient *http.Client
	// Logger is told about tools left out of requests (see LeftOut)
	// and about images the model refused; default: nowhere.
	Logger logrus.FieldLogger
	// MaxTokens limits the reply, thinking included; default
	// DefaultAnthropicMaxTokens, or with ThinkingBudget that budget and
	// DefaultAnthropicMaxTokens more for the answer. It must exceed
	// ThinkingBudget.
	MaxTokens int
	// Temperature is sent when set; nil: the provider's default. It
	// cannot be set with ThinkingBudget: Anthropic refuses it then.
	Temperature *float64
	// ThinkingBudget turns extended thinking on, with this many tokens
	// for the model to think with before it answers (at least
	// MinThinkingBudget); 0: off.
	ThinkingBudget int
	// NoImages sends the images of tool results and user messages as
	// their lines of text only: for a model that takes no images
	// (LLM_IMAGES=off).
	NoImages bool
}

// MinThinkingBudget is the smallest thinking budget Anthropic takes.
const MinThinkingBudget = 1024

// Anthropic is a Model that speaks Anthropic's Messages API. It is safe
// for concurrent use.
//
// langchaingo's Anthropic client (v0.1.14) converts each of its messages
// into exactly one API message and keeps only the first part of an
// assistant or tool message (handleAIMessage and handleToolMessage read
// Parts[0]); a human message may not hold tool results at all. So it
// cannot, by itself, send an assistant turn with text and two tool_use
// blocks, or the two tool_result blocks that answer them in one user
// message — which the API requires.
//
// The workaround keeps langchaingo for everything it does right in a
// request (the request fields, system prompt, tools, headers; the answer
// is read by this package, see answer.go):
//
//  1. toAnthropic gives langchaingo one message per content block — the
//     text, each tool call, each tool result — so no part is ever dropped.
//  2. The HTTP layer then merges consecutive messages of the same role in
//     the JSON body (mergeTurns) before it is sent, which yields the
//     strictly alternating turns the API validates: text and all tool_use
//     blocks in one assistant message, all tool_result blocks in the next
//     user message. The merge only moves whole blocks that langchaingo
//     already serialised; it adds and changes nothing else.
//
// The merge also marks the tool_result blocks of failed calls with
// is_error, which langchaingo has no field for, and puts a result's
// images (Message.Images) in its content after the text, as image blocks:
// langchaingo sends a tool result's content as text only. One limit remains: tool
// call arguments travel as a decoded JSON object, so key order and number
// formatting may change (the values do not).
type Anthropic struct {
	llm       *anthropic.LLM
	model     string
	name      string
	maxTokens int
	tools     *toolSet
	log       logrus.FieldLogger
	// images: the messages' images are sent (AnthropicOptions.NoImages).
	images bool
}

// NewAnthropic returns a client for opts. It sends nothing until Generate.
func NewAnthropic(opts AnthropicOptions) (*Anthropic, error) {
	if opts.APIKey == "" && opts.BaseURL == "" {
		return nil, fmt.Errorf("anthropic: an API key is required")
	}
	model := opts.Model
	if model == "" {
		model = DefaultAnthropicModel
	}
	name := "anthropic " + model
	base := DefaultAnthropicBaseURL
	if opts.BaseURL != "" {
		u, err := parseBaseURL(opts.BaseURL)
		if err != nil {
			return nil, fmt.Errorf("anthropic: %w", err)
		}
		// The whole endpoint, pasted as the base URL, is the base URL.
		u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/messages")
		if !strings.HasSuffix(u.Path, "/v1") {
			u.Path += "/v1"
		}
		base = u.String()
		name += " at " + u.Redacted()
	}
	maxTokens := opts.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultAnthropicMaxTokens
	}
	budget := opts.ThinkingBudget
	if budget != 0 {
		switch {
		case budget < MinThinkingBudget:
			return nil, fmt.Errorf("anthropic: a thinking budget of %d tokens: Anthropic takes at least %d", budget, MinThinkingBudget)
		case opts.Temperature != nil:
			return nil, fmt.Errorf("anthropic: a temperature cannot be set with extended thinking: Anthropic refuses it")
		case opts.MaxTokens <= 0:
			maxTokens = budget + DefaultAnthropicMaxTokens
		case opts.MaxTokens <= budget:
			return nil, fmt.Errorf("anthropic: the reply limit (%d tokens) must exceed the thinking budget (%d)", opts.MaxTokens, budget)
		}
	}
	d := newDoer(opts.HTTPClient)
	d.keyName = opts.KeyName
	temperature := opts.Temperature
	d.rewrite = func(x *exchange, body []byte) ([]byte, error) {
		var (
			errorResults map[string]bool
			images       map[string][]Image
			thinking     *thinkingMarks
		)
		if x != nil {
			errorResults, images, thinking = x.errorResults, x.images, x.thinking
		}
		body, err := mergeTurns(body, errorResults, images, thinking)
		if err != nil {
			return nil, err
		}
		if body, err = setTemperature(body, temperature); err != nil {
			return nil, err
		}
		return setThinking(body, budget)
	}
	token := opts.APIKey
	if token == "" {
		token = "unused" // langchaingo refuses an empty token; the doer drops the header
		d.dropHeader = "X-Api-Key"
	}
	client, err := anthropic.New(
		anthropic.WithToken(token),
		anthropic.WithModel(model),
		anthropic.WithBaseURL(base),
		anthropic.WithHTTPClient(d),
	)
	if err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	tools := newToolSet("anthropic", opts.Logger)
	return &Anthropic{llm: client, model: model, name: name, maxTokens: maxTokens, tools: tools, log: tools.log, images: !opts.NoImages}, nil
}

// Name says which model this is, e.g. "anthropic claude-sonnet-4-5".
func (a *Anthropic) Name() string { return a.name }

// CheckTools returns the tools of defs that are left out of requests
// because Anthropic would refuse them.
func (a *Anthropic) CheckTools(defs []ToolDef) []LeftOut { return a.tools.leftOut(defs) }

// Generate sends the conversation and returns the assistant's reply.
// Errors wrap a *StatusError for HTTP failures and the network error for
// transport failures; see IsTransient.
func (a *Anthropic) Generate(ctx context.Context, msgs []Message, tools []ToolDef) (Message, error) {
	return a.generate(ctx, msgs, tools, nil)
}

// maxPauses is how many times a paused turn (stop_reason "pause_turn")
// is sent back to be continued.
const maxPauses = 4

// generate asks for the reply, streamed to fn when fn is not nil.
//
// A turn Anthropic pauses (stop_reason "pause_turn": a long turn of
// tools that run on its side) is sent back as the conversation's last
// assistant message, which Anthropic continues; the parts are one reply,
// streamed as one. A turn still paused after maxPauses, or whose
// continuation failed, ends with NotePaused. A paused reply with a call
// of the bot's tools in it is not continued: the call wants its result
// first.
func (a *Anthropic) generate(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	reply, err := a.request(ctx, msgs, tools, fn)
	for i := 0; err == nil && reply.Stop == StopPaused && len(reply.ToolCalls) == 0 && i < maxPauses; i++ {
		sofar := reply
		sofar.Content = strings.TrimRightFunc(sofar.Content, unicode.IsSpace) // Anthropic refuses a prefill that ends in white space
		ask := append(msgs[:len(msgs):len(msgs)], sofar)
		var moreFn TextFunc
		if fn != nil {
			moreFn = func(ctx context.Context, text string) error { return fn(ctx, sofar.Content+text) }
		}
		more, merr := a.request(ctx, ask, tools, moreFn)
		if merr != nil {
			if ctx.Err() != nil {
				return Message{}, merr
			}
			break // what arrived stands, with its note
		}
		reply = joinPaused(sofar, more)
	}
	if err == nil && reply.Stop == StopPaused && len(reply.ToolCalls) == 0 {
		if strings.TrimSpace(reply.Content) == "" {
			reply.Content = NotePaused
		} else {
			reply.Content = strings.TrimRight(reply.Content, " \n") + "\n\n" + NotePaused
		}
	}
	return reply, err
}

// joinPaused is a paused reply continued by more: their texts, thinking
// blocks and calls in order, more's stop, the usage of both.
func joinPaused(sofar, more Message) Message {
	out := more
	out.Content = sofar.Content + more.Content
	out.Thinking = append(slices.Clone(sofar.Thinking), more.Thinking...)
	out.ToolCalls = append(slices.Clone(sofar.ToolCalls), more.ToolCalls...)
	if sofar.Usage != nil || more.Usage != nil {
		var u Usage
		for _, r := range []*Usage{sofar.Usage, more.Usage} {
			if r != nil {
				u.Input += r.Input
				u.Output += r.Output
			}
		}
		out.Usage = &u
	}
	return out
}

// request sends one request and returns the reply.
//
// A request whose images Anthropic refuses (one whose first bytes and
// header passed the bot's check, tools.CheckImage, but whose data does
// not decode; a size or format it does not take) is sent again with the
// images' lines of text instead: the conversation keeps the image, and
// without this every later request of the thread would be refused too.
// The refusal comes before any of the answer, so nothing was streamed.
func (a *Anthropic) request(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	reply, withImages, err := a.send(ctx, msgs, tools, fn, a.images)
	if err != nil && withImages && refusesImages(err) && ctx.Err() == nil {
		a.log.WithField("model", a.model).Warn("the model refused an image: this request is sent with the images' lines of text instead")
		reply, _, err = a.send(ctx, msgs, tools, fn, false)
	}
	return reply, err
}

// send sends one request, with the messages' images if images is set,
// and returns the reply and whether the request held an image.
func (a *Anthropic) send(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc, images bool) (Message, bool, error) {
	thinking := newThinkingMarks()
	var shown map[int][]Image
	if images {
		shown = requestImages(msgs)
	}
	req, err := toAnthropic(msgs, thinking, shown)
	if err != nil {
		return Message{}, false, fmt.Errorf("%s: %w", a.name, err)
	}
	lcTools, err := toLangchainTools(a.tools.prepare(tools))
	if err != nil {
		return Message{}, false, fmt.Errorf("%s: %w", a.name, err)
	}
	callOpts := []llms.CallOption{llms.WithMaxTokens(a.maxTokens)}
	if fn != nil {
		// Asks langchaingo for a streamed request; the exchange reads
		// the stream (see answer.go).
		callOpts = append(callOpts, llms.WithStreamingFunc(ignoreChunk))
	}
	if len(lcTools) > 0 {
		callOpts = append(callOpts, llms.WithTools(lcTools))
	}
	x := &exchange{provider: anthropicProvider, fn: fn, position: len(msgs), used: callIDs(msgs), errorResults: map[string]bool{}, thinking: thinking}
	for _, m := range msgs {
		if m.Role == RoleTool && m.IsError {
			x.errorResults[anthropicCallID(m.ToolCallID)] = true
		}
	}
	for i, imgs := range shown {
		if msgs[i].Role == RoleTool {
			if x.images == nil {
				x.images = map[string][]Image{}
			}
			x.images[anthropicCallID(msgs[i].ToolCallID)] = imgs
		}
	}
	_, err = a.llm.GenerateContent(withExchange(ctx, x), req, callOpts...)
	reply, err := x.result(a.name, err)
	return reply, len(shown) > 0, err
}

// toAnthropic converts a conversation for langchaingo's Anthropic client,
// one langchaingo message per content block (see Anthropic for why):
//
//   - System messages are joined into the one system prompt, which
//     langchaingo sends as the top-level "system" field.
//   - An assistant message becomes its text (if any) followed by one
//     message per tool call; mergeTurns joins them again on the wire.
//   - Between two assistant messages, tool results come first and user
//     text after them: the API wants tool_result blocks at the start of
//     the user turn.
//   - Blank texts are left out: the API rejects empty text blocks.
//   - An ID Anthropic would refuse is sent under another (see
//     anthropicCallID).
//   - An assistant message's thinking blocks come first in its turn, as
//     the model wrote them: langchaingo has no such blocks, so a marker
//     text stands in their place and mergeTurns puts them there (see
//     thinkingMarks).
//   - A user message's images in shown (by message index: see
//     requestImages) follow its text as image blocks, in the user turn.
func toAnthropic(msgs []Message, thinking *thinkingMarks, shown map[int][]Image) ([]llms.MessageContent, error) {
	if err := checkMessages(msgs); err != nil {
		return nil, err
	}
	var (
		system        []string
		out           []llms.MessageContent
		results, user []llms.MessageContent // the current user turn
	)
	endUserTurn := func() {
		out = append(out, results...)
		out = append(out, user...)
		results, user = nil, nil
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem:
			if strings.TrimSpace(m.Content) != "" {
				system = append(system, m.Content)
			}
		case RoleUser:
			mc := llms.MessageContent{Role: llms.ChatMessageTypeHuman}
			if strings.TrimSpace(m.Content) != "" {
				mc.Parts = append(mc.Parts, llms.TextContent{Text: m.Content})
			}
			for _, img := range shown[i] {
				mc.Parts = append(mc.Parts, llms.BinaryContent{MIMEType: img.MIME, Data: img.Data})
			}
			if len(mc.Parts) > 0 {
				user = append(user, mc)
			}
		case RoleTool:
			content := m.Content
			if strings.TrimSpace(content) == "" {
				content = "(empty result)"
			}
			results = append(results, llms.MessageContent{
				Role: llms.ChatMessageTypeTool,
				Parts: []llms.ContentPart{llms.ToolCallResponse{
					ToolCallID: anthropicCallID(m.ToolCallID),
					Name:       m.Name,
					Content:    content,
				}},
			})
		case RoleAssistant:
			endUserTurn()
			if len(m.Thinking) > 0 {
				out = append(out, llms.TextParts(llms.ChatMessageTypeAI, thinking.mark(m.Thinking)))
			}
			if strings.TrimSpace(m.Content) != "" {
				out = append(out, llms.TextParts(llms.ChatMessageTypeAI, m.Content))
			}
			for _, c := range m.ToolCalls {
				c.Arguments = objectArguments(c.Arguments)
				c.ID = anthropicCallID(c.ID)
				out = append(out, llms.MessageContent{
					Role:  llms.ChatMessageTypeAI,
					Parts: []llms.ContentPart{toLangchainToolCall(c)},
				})
			}
		}
	}
	endUserTurn()
	if len(out) == 0 {
		return nil, fmt.Errorf("no user or assistant content to send")
	}
	if len(system) > 0 {
		out = append([]llms.MessageContent{
			llms.TextParts(llms.ChatMessageTypeSystem, strings.Join(system, "\n\n")),
		}, out...)
	}
	return out, nil
}

// objectArguments returns args if it is a JSON object, which is what a
// tool_use input must be (langchaingo decodes it into a map and fails the
// whole request otherwise). Anything else — broken JSON the model produced
// earlier, or another provider's output — is kept as text inside an
// object, so the conversation can still be sent and the model sees what
// it wrote.
func objectArguments(args string) string {
	if strings.TrimSpace(args) == "" {
		return "{}"
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) == nil && obj != nil {
		return args
	}
	b, _ := json.Marshal(map[string]string{"invalid_arguments": args}) // a map of strings always marshals
	return string(b)
}

// mergeTurns rewrites a Messages API request body so that consecutive
// messages with the same role become one message whose content is the
// concatenation of theirs, in order, and the tool_result blocks that
// answer the calls in errorResults get "is_error": true, and those that
// answer the calls in images their images after their text (langchaingo
// sends a tool result's content as text only). Other fields pass through
// unchanged. A text block that is one of thinking's marks
// is replaced by the thinking blocks it stands for.
func mergeTurns(body []byte, errorResults map[string]bool, images map[string][]Image, thinking *thinkingMarks) ([]byte, error) {
	var payload map[string]json.RawMessage
	if err := json.Unmarshal(body, &payload); err != nil {
		return nil, fmt.Errorf("merge anthropic turns: %w", err)
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(payload["messages"], &msgs); err != nil {
		return nil, fmt.Errorf("merge anthropic turns: %w", err)
	}
	type turn struct {
		Role    string            `json:"role"`
		Content []json.RawMessage `json:"content"`
	}
	var turns []turn
	for _, m := range msgs {
		blocks, err := contentBlocks(m.Content)
		if err != nil {
			return nil, fmt.Errorf("merge anthropic turns: %w", err)
		}
		for i, b := range blocks {
			blocks[i] = markError(b, errorResults)
			if blocks[i], err = addImages(blocks[i], images); err != nil {
				return nil, fmt.Errorf("merge anthropic turns: %w", err)
			}
		}
		if blocks, err = thinking.replace(blocks); err != nil {
			return nil, fmt.Errorf("merge anthropic turns: %w", err)
		}
		if n := len(turns); n > 0 && turns[n-1].Role == m.Role {
			turns[n-1].Content = append(turns[n-1].Content, blocks...)
			continue
		}
		turns = append(turns, turn{Role: m.Role, Content: blocks})
	}
	merged, err := json.Marshal(turns)
	if err != nil {
		return nil, fmt.Errorf("merge anthropic turns: %w", err)
	}
	payload["messages"] = merged
	return json.Marshal(payload)
}

// markError adds "is_error": true to a tool_result block that answers a
// call in errorResults.
func markError(block json.RawMessage, errorResults map[string]bool) json.RawMessage {
	if len(errorResults) == 0 {
		return block
	}
	var b map[string]json.RawMessage
	if json.Unmarshal(block, &b) != nil || string(b["type"]) != `"tool_result"` {
		return block
	}
	var id string
	if json.Unmarshal(b["tool_use_id"], &id) != nil || !errorResults[id] {
		return block
	}
	b["is_error"] = json.RawMessage("true")
	out, err := json.Marshal(b)
	if err != nil {
		return block
	}
	return out
}

// addImages puts the images of a tool_result block's call after its
// content, as image blocks: the content becomes a list of blocks, its
// text first.
func addImages(block json.RawMessage, images map[string][]Image) (json.RawMessage, error) {
	if len(images) == 0 {
		return block, nil
	}
	var b map[string]json.RawMessage
	if json.Unmarshal(block, &b) != nil || string(b["type"]) != `"tool_result"` {
		return block, nil
	}
	var id string
	if json.Unmarshal(b["tool_use_id"], &id) != nil || len(images[id]) == 0 {
		return block, nil
	}
	content := []json.RawMessage{}
	if raw, ok := b["content"]; ok && string(raw) != "null" {
		var err error
		if content, err = contentBlocks(raw); err != nil {
			return nil, err
		}
	}
	for _, img := range images[id] {
		raw, err := json.Marshal(imageBlock{Type: "image", Source: imageSource{Type: "base64", MediaType: img.MIME, Data: img.Data}})
		if err != nil {
			return nil, err
		}
		content = append(content, raw)
	}
	var err error
	if b["content"], err = json.Marshal(content); err != nil {
		return nil, err
	}
	return json.Marshal(b)
}

// imageBlock is an image content block of the Messages API.
type imageBlock struct {
	Type   string      `json:"type"`
	Source imageSource `json:"source"`
}

type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      []byte `json:"data"` // base64, as the API wants it
}

// contentBlocks returns a message's content as a list of blocks; the API
// also accepts a plain string, which is one text block.
func contentBlocks(raw json.RawMessage) ([]json.RawMessage, error) {
	var blocks []json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err == nil {
		return blocks, nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return nil, fmt.Errorf("message content is neither a list of blocks nor text")
	}
	b, err := json.Marshal(map[string]string{"type": "text", "text": text})
	if err != nil {
		return nil, err
	}
	return []json.RawMessage{b}, nil
}

// setThinking turns extended thinking on with budget tokens, unless
// budget is 0.
func setThinking(body []byte, budget int) ([]byte, error) {
	if budget == 0 {
		return body, nil
	}
	var payload map[string]json.RawMessage
	if err := json.Unmarshal(body, &payload); err != nil {
		return nil, fmt.Errorf("set thinking: %w", err)
	}
	payload["thinking"] = json.RawMessage(fmt.Sprintf(`{"type":"enabled","budget_tokens":%d}`, budget))
	return json.Marshal(payload)
}

// thinkingMarks are the thinking blocks of one request's assistant
// messages, each list under the mark that stands in its place in the
// body langchaingo writes. A mark holds a random nonce of the request,
// so no text of the conversation can be taken for one.
type thinkingMarks struct {
	nonce  string
	blocks map[string][]Thinking
}

func newThinkingMarks() *thinkingMarks {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return &thinkingMarks{nonce: hex.EncodeToString(b[:]), blocks: map[string][]Thinking{}}
}

// mark returns the text that stands for blocks.
func (t *thinkingMarks) mark(blocks []Thinking) string {
	m := fmt.Sprintf("thinking %s %d", t.nonce, len(t.blocks))
	t.blocks[m] = blocks
	return m
}

// replace returns blocks with each mark's text block replaced by the
// thinking blocks it stands for, as Anthropic sent them: a thinking
// block with its thinking and signature, a redacted_thinking block with
// its data.
func (t *thinkingMarks) replace(blocks []json.RawMessage) ([]json.RawMessage, error) {
	if t == nil || len(t.blocks) == 0 {
		return blocks, nil
	}
	var out []json.RawMessage
	for i, b := range blocks {
		var text struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		kept, ok := []Thinking(nil), false
		if json.Unmarshal(b, &text) == nil && text.Type == "text" {
			kept, ok = t.blocks[text.Text]
		}
		if !ok {
			if out != nil {
				out = append(out, b)
			}
			continue
		}
		if out == nil {
			out = append(make([]json.RawMessage, 0, len(blocks)+len(kept)), blocks[:i]...)
		}
		for _, k := range kept {
			var (
				raw []byte
				err error
			)
			if k.Type == RedactedThinkingBlock {
				raw, err = json.Marshal(struct {
					Type string `json:"type"`
					Data string `json:"data"`
				}{k.Type, k.Data})
			} else {
				raw, err = json.Marshal(struct {
					Type      string `json:"type"`
					Thinking  string `json:"thinking"`
					Signature string `json:"signature"`
				}{k.Type, k.Text, k.Signature})
			}
			if err != nil {
				return nil, err
			}
			out = append(out, raw)
		}
	}
	if out == nil {
		return blocks, nil
	}
	return out, nil
}
