package llm

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/internal/settingurl"
)

// FromEnv builds the model the environment asks for. getenv is usually
// os.Getenv; nothing else is read.
//
//	LLM_PROVIDER        openai, anthropic or demo. Unset: openai if
//	                    OPENAI_API_KEY or OPENAI_BASE_URL is set, else
//	                    anthropic if ANTHROPIC_API_KEY is set, else demo.
//	LLM_MODEL           the model name; defaults DefaultOpenAIModel and
//	                    DefaultAnthropicModel. A compatible server
//	                    usually needs it (e.g. "llama3.1").
//	OPENAI_API_KEY      OpenAI's key; optional with OPENAI_BASE_URL.
//	OPENAI_BASE_URL     an OpenAI-compatible server, e.g.
//	                    http://localhost:11434/v1 (Ollama), or Azure
//	                    OpenAI's v1 endpoint (its deployment URLs are
//	                    refused: see parseBaseURL).
//	ANTHROPIC_API_KEY   Anthropic's key.
//	ANTHROPIC_BASE_URL  another Anthropic endpoint (a proxy).
//	LLM_TEMPERATURE     the sampling temperature, e.g. 0.2. Unset: none
//	                    is sent and the provider's default applies. It is
//	                    never sent to OpenAI's reasoning models (o1, o3,
//	                    o4-mini, gpt-5 …), which refuse it.
//	LLM_REASONING_EFFORT
//	                    how long an OpenAI reasoning model thinks: none,
//	                    minimal, low, medium, high or xhigh, sent as
//	                    reasoning_effort (not to Anthropic); a model that
//	                    refuses it is not sent it again. Unset: the
//	                    model's default.
//	LLM_THINKING_BUDGET Anthropic's extended thinking: how many tokens
//	                    the model may think with before it answers, at
//	                    least 1024; 0 or unset: off. The reply limit
//	                    becomes the budget and 4096 more, and
//	                    LLM_TEMPERATURE cannot be set with it (Anthropic
//	                    refuses a temperature then).
//	LLM_IMAGES          on (the default) or off: whether images are
//	                    sent to the model — those in tools' results (an
//	                    MCP server's screenshot) and those people attach
//	                    to their messages — or only the lines of text
//	                    that stand for them. Off for an OpenAI-compatible
//	                    server whose model takes no images; see
//	                    ImagesFromEnv.
//
// OpenAI and Anthropic models come wrapped in Retry with its defaults.
// Errors never contain a key.
func FromEnv(getenv func(string) string) (Model, error) {
	return FromEnvWithLogger(getenv, nil)
}

// ImagesFromEnv reads LLM_IMAGES: whether the model is shown images.
// Off, the model client sends none, and the rest of the bot does not
// fetch or keep any: the agent asks tools for their text only, and the
// Slack front end does not download the images people attach.
func ImagesFromEnv(getenv func(string) string) (bool, error) {
	switch v := strings.ToLower(strings.TrimSpace(getenv("LLM_IMAGES"))); v {
	case "", "on":
		return true, nil
	case "off":
		return false, nil
	default:
		return false, fmt.Errorf("LLM_IMAGES=%s: want on or off", quoteName(v))
	}
}

// FromEnvWithLogger is FromEnv with a logger for the model's warnings
// (a tool left out because the provider would refuse its schema).
func FromEnvWithLogger(getenv func(string) string, log logrus.FieldLogger) (Model, error) {
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	provider := strings.ToLower(get("LLM_PROVIDER"))
	if provider == "" {
		switch {
		case get("OPENAI_API_KEY") != "" || get("OPENAI_BASE_URL") != "":
			provider = "openai"
		case get("ANTHROPIC_API_KEY") != "":
			provider = "anthropic"
		default:
			provider = "demo"
		}
	}
	var temperature *float64
	if v := get("LLM_TEMPERATURE"); v != "" {
		t, err := strconv.ParseFloat(v, 64)
		if err != nil || t < 0 || t > 2 {
			return nil, fmt.Errorf("LLM_TEMPERATURE=%s: want a number from 0 to 2", quoteName(v))
		}
		temperature = &t
	}
	effort := strings.ToLower(get("LLM_REASONING_EFFORT"))
	switch effort {
	case "", "none", "minimal", "low", "medium", "high", "xhigh":
	default:
		return nil, fmt.Errorf("LLM_REASONING_EFFORT=%s: want none, minimal, low, medium, high or xhigh", quoteName(effort))
	}
	var budget int
	if v := get("LLM_THINKING_BUDGET"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || (n > 0 && n < MinThinkingBudget) || n > maxThinkingBudget {
			return nil, fmt.Errorf("LLM_THINKING_BUDGET=%s: want a whole number of tokens from %d to %d, or 0 for no extended thinking", quoteName(v), MinThinkingBudget, maxThinkingBudget)
		}
		budget = n
	}
	images, err := ImagesFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	noImages := !images
	switch provider {
	case "openai":
		if get("OPENAI_API_KEY") == "" && get("OPENAI_BASE_URL") == "" {
			return nil, fmt.Errorf("LLM_PROVIDER=openai needs OPENAI_API_KEY, or OPENAI_BASE_URL for a compatible server")
		}
		if err := checkBaseURL("OPENAI_BASE_URL", get("OPENAI_BASE_URL"), openAIBaseURLExample); err != nil {
			return nil, err
		}
		m, err := NewOpenAI(OpenAIOptions{
			APIKey:          get("OPENAI_API_KEY"),
			KeyName:         "OPENAI_API_KEY",
			BaseURL:         get("OPENAI_BASE_URL"),
			Model:           get("LLM_MODEL"),
			Temperature:     temperature,
			ReasoningEffort: effort,
			NoImages:        noImages,
			Logger:          log,
		})
		if err != nil {
			return nil, fmt.Errorf("OPENAI_BASE_URL: %w", withoutClientName(err))
		}
		if budget > 0 && log != nil {
			log.Warn("LLM_THINKING_BUDGET is for Anthropic's extended thinking: OpenAI-compatible servers are not sent it")
		}
		return Continue(Retry(m, RetryOptions{}), false), nil
	case "anthropic":
		if get("ANTHROPIC_API_KEY") == "" && get("ANTHROPIC_BASE_URL") == "" {
			return nil, fmt.Errorf("LLM_PROVIDER=anthropic needs ANTHROPIC_API_KEY")
		}
		if err := checkBaseURL("ANTHROPIC_BASE_URL", get("ANTHROPIC_BASE_URL"), anthropicBaseURLExample); err != nil {
			return nil, err
		}
		if temperature != nil && *temperature > 1 {
			return nil, fmt.Errorf("LLM_TEMPERATURE=%v: Anthropic takes 0 to 1", *temperature)
		}
		if temperature != nil && budget > 0 {
			return nil, fmt.Errorf("LLM_TEMPERATURE=%v with LLM_THINKING_BUDGET=%d: Anthropic takes no temperature with extended thinking; unset one of them", *temperature, budget)
		}
		if effort != "" && log != nil {
			// Left from an OpenAI configuration, perhaps: it does not
			// stop a bot that was switched to Anthropic.
			log.Warn("LLM_REASONING_EFFORT is for OpenAI's reasoning models: Anthropic is not sent it")
		}
		m, err := NewAnthropic(AnthropicOptions{
			APIKey:         get("ANTHROPIC_API_KEY"),
			KeyName:        "ANTHROPIC_API_KEY",
			BaseURL:        get("ANTHROPIC_BASE_URL"),
			Model:          get("LLM_MODEL"),
			Temperature:    temperature,
			ThinkingBudget: budget,
			NoImages:       noImages,
			Logger:         log,
		})
		if err != nil {
			return nil, fmt.Errorf("ANTHROPIC_BASE_URL: %w", withoutClientName(err))
		}
		// Anthropic takes no prefill with extended thinking: a cut-off
		// answer is then continued as with other providers.
		return Continue(Retry(m, RetryOptions{}), budget == 0), nil
	case "demo":
		return NewDemo(), nil
	}
	return nil, fmt.Errorf("LLM_PROVIDER=%s: unknown provider; use openai, anthropic or demo", quoteName(provider))
}

// What a good base URL looks like, for the error of a bad one.
const (
	openAIBaseURLExample    = "http://localhost:11434/v1 (Ollama) or https://api.openai.com/v1"
	anthropicBaseURLExample = "https://api.anthropic.com/v1, or a proxy's, such as http://localhost:4000"
)

// checkBaseURL refuses a base URL (the variable name, its value raw)
// that is not an absolute http or https URL, saying what is wrong and
// what a good one looks like (example). Unset is fine. The value is not
// repeated: a key pasted into the wrong variable must not end up in a
// log. What else the provider refuses of a URL (a query, Azure's
// deployment URLs) it says itself.
func checkBaseURL(name, raw, example string) error {
	if raw == "" {
		return nil
	}
	if _, why := settingurl.Problem(raw); why != "" {
		return fmt.Errorf("%s: %s; want the server's base URL, e.g. %s", name, why, example)
	}
	return nil
}

// withoutClientName is a model client's error without the client's name
// ("openai: base URL must …" → "base URL must …"): FromEnv names the
// variable instead, once.
func withoutClientName(err error) error {
	if inner := errors.Unwrap(err); inner != nil {
		return inner
	}
	return err
}

// maxThinkingBudget is the largest LLM_THINKING_BUDGET taken: with the
// 4096 tokens for the answer, the most any Claude model writes.
const maxThinkingBudget = 128000 - DefaultAnthropicMaxTokens

var plainName = regexp.MustCompile(`^[a-z0-9_.-]{1,32}$`)

// quoteName quotes a configuration value for an error message, unless it
// does not look like a provider name at all: a key pasted into the wrong
// variable must not end up in a log.
func quoteName(s string) string {
	if plainName.MatchString(s) {
		return fmt.Sprintf("%q", s)
	}
	return "(value hidden)"
}
