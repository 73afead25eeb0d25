package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/sirupsen/logrus"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"
)

// DefaultOpenAIModel is the model NewOpenAI uses when none is given.
const DefaultOpenAIModel = "gpt-4o-mini"

// DefaultOpenAIBaseURL is OpenAI's API. A compatible server's base URL
// includes the version path in the same way, e.g.
// http://localhost:11434/v1 for Ollama or http://localhost:8000/v1 for vLLM.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// OpenAIOptions configure NewOpenAI.
type OpenAIOptions struct {
	// APIKey is sent as a bearer token. It may be empty when BaseURL
	// points at a server that needs none; then no Authorization header
	// is sent.
	APIKey string
	// KeyName, if set, is where the key came from (an environment
	// variable), named in the error of a provider that refuses the key
	// (HTTP 401), so that whoever reads it knows what to fix.
	KeyName string
	// BaseURL is the API root that /chat/completions is appended to.
	// Default DefaultOpenAIBaseURL.
	BaseURL string
	// Model defaults to DefaultOpenAIModel.
	Model string
	// HTTPClient defaults to a client with DefaultHTTPTimeout.
	HTTPClient *http.Client
	// Logger is told about tools left out of requests (see LeftOut);
	// default: nowhere.
	Logger logrus.FieldLogger
	// Temperature is sent when set, except to reasoning models (see
	// ReasoningModel), which refuse it; nil: the provider's default.
	Temperature *float64
	// ReasoningEffort is sent as reasoning_effort when set ("low",
	// "high" …): how long a reasoning model thinks before it answers.
	// A model that refuses it is not sent it again. "": the model's
	// default.
	ReasoningEffort string
	// NoImages sends the images of tool results and user messages as
	// their lines of text only: for a model that takes no images
	// (LLM_IMAGES=off).
	NoImages bool
}

// OpenAI is a Model that speaks OpenAI's chat completions API, to OpenAI
// or to any compatible server. It is safe for concurrent use.
type OpenAI struct {
	llm   *openai.LLM
	model string
	name  string
	tools *toolSet
	log   logrus.FieldLogger
	// temperature is what LLM_TEMPERATURE asked for (nil: none), and
	// noTemperature is set once the model refused it: a reasoning model
	// the bot did not know by its name (see generate).
	temperature   *float64
	noTemperature *atomic.Bool
	// noStreamOptions is set once a server refused stream_options
	// (Mistral's API does): streamed requests go without it.
	noStreamOptions *atomic.Bool
	// effort is what LLM_REASONING_EFFORT asked for (""; none), and
	// noEffort is set once the model refused it.
	effort   string
	noEffort *atomic.Bool
	// developer: the model is one of OpenAI's reasoning models, which
	// take the instructions as developer messages (see toOpenAI).
	developer bool
	// callID is the ID a call is sent under (see openAICallID).
	callID func(string) string
	// images: the messages' images are sent (OpenAIOptions.NoImages),
	// until noImages is set: the model refused them (see generate).
	images   bool
	noImages *atomic.Bool
}

// NewOpenAI returns a client for opts. It sends nothing until Generate.
func NewOpenAI(opts OpenAIOptions) (*OpenAI, error) {
	if opts.APIKey == "" && opts.BaseURL == "" {
		return nil, fmt.Errorf("openai: an API key is required (or a base URL of a compatible server that needs none)")
	}
	model := opts.Model
	if model == "" {
		model = DefaultOpenAIModel
	}
	name := "openai " + model
	base := DefaultOpenAIBaseURL
	azure, callID := false, openAICallID
	if opts.BaseURL != "" {
		u, err := parseBaseURL(opts.BaseURL)
		if err != nil {
			return nil, fmt.Errorf("openai: %w", err)
		}
		// The whole endpoint, pasted as the base URL, is the base URL.
		u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/chat/completions")
		base = strings.TrimSuffix(u.String(), "/")
		name += " at " + u.Redacted()
		azure = azureHost(u)
		if strings.EqualFold(u.Hostname(), "api.mistral.ai") {
			callID = mistralCallID
		}
	}
	d := newDoer(opts.HTTPClient)
	d.keyName = opts.KeyName
	if azure && opts.APIKey != "" {
		// Azure's v1 endpoint takes the key as OpenAI's SDKs send it
		// (a bearer token) and in its own header; both are sent.
		d.header = http.Header{"Api-Key": {opts.APIKey}}
	}
	temperature := opts.Temperature
	if ReasoningModel(model) {
		temperature = nil
	}
	noTemperature, noStreamOptions, noEffort := new(atomic.Bool), new(atomic.Bool), new(atomic.Bool)
	d.rewrite = func(x *exchange, body []byte) ([]byte, error) {
		var err error
		if x != nil && len(x.developer) > 0 {
			if body, err = prependDeveloper(body, x.developer); err != nil {
				return nil, err
			}
		}
		if noStreamOptions.Load() {
			if body, err = dropField(body, "stream_options"); err != nil {
				return nil, err
			}
		}
		if opts.ReasoningEffort != "" && !noEffort.Load() {
			if body, err = setField(body, "reasoning_effort", opts.ReasoningEffort); err != nil {
				return nil, err
			}
		}
		if noTemperature.Load() {
			return setTemperature(body, nil)
		}
		return setTemperature(body, temperature)
	}
	token := opts.APIKey
	if token == "" {
		// langchaingo refuses an empty token; the doer removes the
		// header it produces, so a key-less server sees none.
		token = "unused"
		d.dropHeader = "Authorization"
	}
	// Every setting is passed explicitly: langchaingo would otherwise
	// read OPENAI_* variables from the process environment itself.
	client, err := openai.New(
		openai.WithToken(token),
		openai.WithModel(model),
		openai.WithBaseURL(base),
		openai.WithOrganization(""),
		openai.WithHTTPClient(d),
	)
	if err != nil {
		return nil, fmt.Errorf("openai: %w", err)
	}
	tools := newToolSet("openai", opts.Logger)
	return &OpenAI{llm: client, model: model, name: name, tools: tools, log: tools.log,
		temperature: temperature, noTemperature: noTemperature, noStreamOptions: noStreamOptions,
		effort: opts.ReasoningEffort, noEffort: noEffort,
		developer: ReasoningModel(model) && !strings.Contains(model, "/"), callID: callID, images: !opts.NoImages, noImages: new(atomic.Bool)}, nil
}

// Name says which model and server this is, e.g. "openai gpt-4o-mini".
func (o *OpenAI) Name() string { return o.name }

// CheckTools returns the tools of defs that are left out of requests
// because OpenAI would refuse them.
func (o *OpenAI) CheckTools(defs []ToolDef) []LeftOut { return o.tools.leftOut(defs) }

// Generate sends the conversation and returns the assistant's reply.
// Errors wrap a *StatusError for HTTP failures and the network error for
// transport failures; see IsTransient.
func (o *OpenAI) Generate(ctx context.Context, msgs []Message, tools []ToolDef) (Message, error) {
	return o.generate(ctx, msgs, tools, nil)
}

// generate asks for the reply, streamed to fn when fn is not nil.
func (o *OpenAI) generate(ctx context.Context, msgs []Message, tools []ToolDef, fn TextFunc) (Message, error) {
	images := o.images && !o.noImages.Load() && hasImages(msgs)
	req, instructions, err := toOpenAI(msgs, o.developer, o.callID, images)
	if err != nil {
		return Message{}, fmt.Errorf("%s: %w", o.name, err)
	}
	lcTools, err := toLangchainTools(o.tools.prepare(tools))
	if err != nil {
		return Message{}, fmt.Errorf("%s: %w", o.name, err)
	}
	var callOpts []llms.CallOption
	if fn != nil {
		// Asks langchaingo for a streamed request; the exchange reads
		// the stream (see answer.go).
		callOpts = append(callOpts, llms.WithStreamingFunc(ignoreChunk))
	}
	if len(lcTools) > 0 {
		callOpts = append(callOpts, llms.WithTools(lcTools))
	}
	send := func() (Message, error) {
		x := &exchange{provider: openAIProvider, fn: fn, position: len(msgs), used: callIDs(msgs), developer: instructions}
		_, err := o.llm.GenerateContent(withExchange(ctx, x), req, callOpts...)
		return x.result(o.name, err)
	}
	// A refused parameter the bot can do without is dropped from this
	// request and every later one, and the request sent again: at most
	// once per parameter (three of them, and the images), each refusal
	// having come before any of the answer, so nothing was streamed yet.
	reply, err := send()
	for range 4 {
		switch {
		case err != nil && images && refusesImages(err):
			// A model that takes no images (an older or a local one,
			// where LLM_IMAGES=off was not set), or an image it would
			// not take: this request goes with the images' lines, and
			// if the model takes none, every later one too.
			images = false
			if modelTakesNoImages(err) {
				if o.noImages.CompareAndSwap(false, true) {
					o.log.WithField("model", o.model).Warn("the model takes no images: tool results' images are sent as their lines of text (set LLM_IMAGES=off to say so at start)")
				}
			} else {
				o.log.WithField("model", o.model).Warn("the model refused a tool result's image: this request is sent with the images' lines of text instead")
			}
			if req, instructions, err = toOpenAI(msgs, o.developer, o.callID, false); err != nil {
				return Message{}, fmt.Errorf("%s: %w", o.name, err)
			}
		case err != nil && o.temperature != nil && refusesTemperature(err):
			// A reasoning model the bot did not know by its name (an
			// Azure deployment's, a newer family's).
			if o.noTemperature.CompareAndSwap(false, true) {
				o.log.WithField("model", o.model).Warn("the model refuses a temperature: LLM_TEMPERATURE is not sent to it")
			}
		case err != nil && o.effort != "" && refusesParam(err, "reasoning_effort"):
			// A model that does not reason.
			if o.noEffort.CompareAndSwap(false, true) {
				o.log.WithField("model", o.model).Warn("the model refuses reasoning_effort: LLM_REASONING_EFFORT is not sent to it")
			}
		case err != nil && fn != nil && refusesStreamOptions(err):
			// A server without OpenAI's stream_options (Mistral's API):
			// streamed answers come without their token counts.
			if o.noStreamOptions.CompareAndSwap(false, true) {
				o.log.WithField("model", o.model).Warn("the server refuses stream_options: streamed answers are asked for without their token counts")
			}
		default:
			return reply, notFoundHint(err)
		}
		reply, err = send()
	}
	return reply, notFoundHint(err)
}

// notFoundHint adds what to check to a 404 that is not a chat
// completions API's own (an unknown model's is): the base URL is not the
// API root, as Ollama's or vLLM's without /v1, whose routers answer
// "404 page not found" or {"detail": "Not Found"}.
func notFoundHint(err error) error {
	var se *StatusError
	if errors.As(err, &se) && se.StatusCode == http.StatusNotFound && se.Type == "" {
		return fmt.Errorf("%w; nothing answers at this base URL: the API root usually ends in /v1", err)
	}
	return err
}

// hasImages reports whether a tool or user message of msgs holds an
// image.
func hasImages(msgs []Message) bool {
	for _, m := range msgs {
		if (m.Role == RoleTool || m.Role == RoleUser) && len(m.Images) > 0 {
			return true
		}
	}
	return false
}

// refusesImages reports whether err is a refusal of a request's images:
// an HTTP 400 or 422 whose message speaks of images, or of the message
// content that only images make a list of parts (a text-only model's
// server wants a string there).
func refusesImages(err error) bool {
	var se *StatusError
	if !errors.As(err, &se) || (se.StatusCode != http.StatusBadRequest && se.StatusCode != http.StatusUnprocessableEntity) {
		return false
	}
	msg := strings.ToLower(se.Message)
	return strings.Contains(msg, "image") || strings.Contains(msg, "multimodal") || strings.Contains(msg, "vision") ||
		(strings.Contains(se.Param, "content") && strings.Contains(msg, "must be a string"))
}

// modelTakesNoImages reports whether a refusal of images (refusesImages)
// says the model takes none, rather than that one image would not do
// (a format it does not take): OpenAI's "image_url is only supported by
// certain models", a server's "does not support images" or "not a
// multimodal model", or a content that must be a string.
func modelTakesNoImages(err error) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	msg := strings.ToLower(se.Message)
	for _, says := range []string{"only supported by certain models", "not support image", "n't support image",
		"not support multimodal", "not support vision", "not a multimodal", "must be a string",
		"image input is not supported", "image inputs are not supported", "images are not supported"} {
		if strings.Contains(msg, says) {
			return true
		}
	}
	return false
}

// refusesParam reports whether err is OpenAI's refusal of the request's
// parameter name (HTTP 400 with that "param").
func refusesParam(err error, name string) bool {
	var se *StatusError
	return errors.As(err, &se) && se.StatusCode == http.StatusBadRequest && se.Param == name
}

// setField sets a top-level string field of a JSON request body.
func setField(body []byte, name, value string) ([]byte, error) {
	var payload map[string]json.RawMessage
	if err := json.Unmarshal(body, &payload); err != nil {
		return nil, fmt.Errorf("set %s: %w", name, err)
	}
	v, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("set %s: %w", name, err)
	}
	payload[name] = v
	return json.Marshal(payload)
}

// refusesStreamOptions reports whether err is a server's refusal of the
// request's stream_options: Mistral's 422 "Extra inputs are not
// permitted" at body.stream_options, or a 400 naming it.
func refusesStreamOptions(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.StatusCode == http.StatusBadRequest || se.StatusCode == http.StatusUnprocessableEntity) &&
		(se.Param == "stream_options" || strings.Contains(se.Message, "stream_options"))
}

// dropField removes a top-level field from a JSON request body.
func dropField(body []byte, name string) ([]byte, error) {
	var payload map[string]json.RawMessage
	if err := json.Unmarshal(body, &payload); err != nil {
		return nil, fmt.Errorf("drop %s: %w", name, err)
	}
	if _, ok := payload[name]; !ok {
		return body, nil
	}
	delete(payload, name)
	return json.Marshal(payload)
}

// refusesTemperature reports whether err is OpenAI's refusal of the
// request's temperature (HTTP 400, param "temperature": "Unsupported
// value: 'temperature' does not support 0.2 with this model").
func refusesTemperature(err error) bool { return refusesParam(err, "temperature") }

// toOpenAI converts a conversation for langchaingo's OpenAI client.
//
// What the client (v0.1.14) does with it, from its source:
//   - A tool message must have exactly one part, a ToolCallResponse;
//     it sends its ToolCallID and Content (not Name). Two results in one
//     message are rejected ("expected exactly one part"), so each of our
//     tool messages — one per result — becomes its own tool message,
//     which is also what the API expects.
//   - In other messages ToolCall parts are moved to tool_calls and the
//     remaining parts become content; a single text part is sent as a
//     plain string. ToolCall.Type is copied verbatim, so it must be
//     "function".
//
// An ID the server would refuse is sent under another (callID: see
// openAICallID).
//
// With images set, the images of tool messages (within requestImages'
// budget) follow the turn's tool messages in one user message: a tool
// message holds text only. Each result's images come after a text part
// that names the call and tool they are from. A user message's own
// images (attached by the person) follow its text as image_url parts.
//
// With developer set (OpenAI's reasoning models), the system messages
// are returned as instructions instead, for the HTTP layer to send as
// developer messages at the start of the conversation
// (prependDeveloper): that is the role OpenAI gives the instructions of
// these models, and langchaingo would fold a system message into the
// first user message for o1 and o3, where the model would weigh the
// bot's instructions as the person's words.
func toOpenAI(msgs []Message, developer bool, callID func(string) string, images bool) (out []llms.MessageContent, instructions []string, err error) {
	if err := checkMessages(msgs); err != nil {
		return nil, nil, err
	}
	var (
		shown map[int][]Image
		seen  []llms.ContentPart // the images of the turn's results so far
	)
	if images {
		shown = requestImages(msgs)
	}
	out = make([]llms.MessageContent, 0, len(msgs)+len(shown))
	for i, m := range msgs {
		if m.Role != RoleTool && len(seen) > 0 {
			out = append(out, llms.MessageContent{Role: llms.ChatMessageTypeHuman, Parts: seen})
			seen = nil
		}
		switch m.Role {
		case RoleSystem:
			if developer {
				instructions = append(instructions, m.Content)
				continue
			}
			out = append(out, llms.TextParts(llms.ChatMessageTypeSystem, m.Content))
		case RoleUser:
			mc := llms.TextParts(llms.ChatMessageTypeHuman, m.Content)
			for _, img := range shown[i] {
				mc.Parts = append(mc.Parts, llms.ImageURLContent{URL: dataURL(img)})
			}
			out = append(out, mc)
		case RoleAssistant:
			mc := llms.MessageContent{Role: llms.ChatMessageTypeAI}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				mc.Parts = append(mc.Parts, llms.TextContent{Text: m.Content})
			}
			for _, c := range m.ToolCalls {
				c.ID = callID(c.ID)
				mc.Parts = append(mc.Parts, toLangchainToolCall(c))
			}
			out = append(out, mc)
		case RoleTool:
			out = append(out, llms.MessageContent{
				Role: llms.ChatMessageTypeTool,
				Parts: []llms.ContentPart{llms.ToolCallResponse{
					ToolCallID: callID(m.ToolCallID),
					Name:       m.Name,
					Content:    m.Content,
				}},
			})
			if imgs := shown[i]; len(imgs) > 0 {
				seen = append(seen, llms.TextContent{Text: imagesIntro(len(imgs), callID(m.ToolCallID), m.Name)})
				for _, img := range imgs {
					seen = append(seen, llms.ImageURLContent{URL: dataURL(img)})
				}
			}
		}
	}
	if len(seen) > 0 {
		out = append(out, llms.MessageContent{Role: llms.ChatMessageTypeHuman, Parts: seen})
	}
	return out, instructions, nil
}

// prependDeveloper puts a developer message with each of instructions at
// the start of a chat completions request body.
func prependDeveloper(body []byte, instructions []string) ([]byte, error) {
	var payload map[string]json.RawMessage
	if err := json.Unmarshal(body, &payload); err != nil {
		return nil, fmt.Errorf("add developer messages: %w", err)
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(payload["messages"], &msgs); err != nil {
		return nil, fmt.Errorf("add developer messages: %w", err)
	}
	out := make([]json.RawMessage, 0, len(instructions)+len(msgs))
	for _, text := range instructions {
		m, err := json.Marshal(map[string]string{"role": "developer", "content": text})
		if err != nil {
			return nil, fmt.Errorf("add developer messages: %w", err)
		}
		out = append(out, m)
	}
	merged, err := json.Marshal(append(out, msgs...))
	if err != nil {
		return nil, fmt.Errorf("add developer messages: %w", err)
	}
	payload["messages"] = merged
	return json.Marshal(payload)
}

// parseBaseURL accepts an absolute http or https URL without a query or
// fragment: the API's paths are appended to it. Errors do not quote the
// URL, which may hold credentials.
func parseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("base URL must be an absolute http or https URL")
	}
	if azureDeployment(u) {
		return nil, fmt.Errorf("base URL is an Azure OpenAI deployment URL, which the bot does not speak: " +
			"use the resource's v1 endpoint, https://NAME.openai.azure.com/openai/v1, with LLM_MODEL set to the deployment's name")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, fmt.Errorf("base URL must have no query (?…) or fragment (#…): the API's paths are appended to it")
	}
	return u, nil
}

// azureDeployment reports whether u is an Azure OpenAI deployment URL
// (…/openai/deployments/NAME…?api-version=…), the API Azure had before
// its OpenAI-compatible v1 endpoint.
func azureDeployment(u *url.URL) bool {
	return strings.Contains(u.Path, "/openai/deployments/") || u.Query().Has("api-version")
}

// azureHost reports whether u is an Azure OpenAI resource, which takes
// its key in an api-key header.
func azureHost(u *url.URL) bool {
	h := strings.ToLower(u.Hostname())
	for _, suffix := range []string{".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com"} {
		if strings.HasSuffix(h, suffix) {
			return true
		}
	}
	return false
}
