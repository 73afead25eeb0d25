package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// DemoToolName is the tool the demo model knows how to call.
const DemoToolName = "http_request"

// Demo is the offline demo model: no network, no key, no randomness and no
// clock, so a conversation replayed from a checkpoint gets the same
// replies. It exists to show the approval flow without configuring an LLM:
//
//   - If the latest user message contains an http(s) URL that no tool
//     result has answered yet, it asks to GET it with the http_request
//     tool (when that tool is offered) — one call, whose ID
//     ("demo-<position>") depends only on the conversation.
//   - After a tool result it summarises it: the status line and a short
//     excerpt, or — when the call was rejected, failed or timed out — a
//     plain acknowledgement, without trying again.
//   - Anything else gets a short explanation of the demo and of how to
//     configure a real model.
//
// GenerateStream shows a reply word by word, Pause apart.
type Demo struct {
	// Pause is the wait between two streamed words: DemoWordPause when
	// zero, none when negative.
	Pause time.Duration
}

// NewDemo returns the demo model.
func NewDemo() *Demo { return &Demo{} }

// Name returns "demo (offline)".
func (*Demo) Name() string { return "demo (offline)" }

// Generate returns the demo's reply to msgs.
func (*Demo) Generate(ctx context.Context, msgs []Message, tools []ToolDef) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, err
	}
	if n := len(msgs); n > 0 && msgs[n-1].Role == RoleTool {
		return assistantText(demoSummary(msgs)), nil
	}
	lastUser := -1
	for i, m := range msgs {
		if m.Role == RoleUser {
			lastUser = i
		}
	}
	if lastUser < 0 || answered(msgs[lastUser+1:]) {
		return assistantText(demoHelp), nil
	}
	url := findURL(msgs[lastUser].Content)
	if url == "" {
		return assistantText(demoHelp), nil
	}
	if !offered(tools, DemoToolName) {
		return assistantText(fmt.Sprintf("I'd fetch %s, but the %s tool isn't available here, so I can't. "+
			"Check the policy file: a tool that is not listed there is not offered to the model.", url, DemoToolName)), nil
	}
	return Message{
		Role:    RoleAssistant,
		Content: fmt.Sprintf("I'll fetch %s with a GET request to see what it returns.", url),
		ToolCalls: []ToolCall{{
			ID:        fmt.Sprintf("demo-%d", len(msgs)),
			Name:      DemoToolName,
			Arguments: getArguments(url),
		}},
	}, nil
}

const demoHelp = "I'm the offline demo model: no LLM is configured, so I can't really answer questions.\n\n" +
	"To see approvals in action, ask me to fetch a URL, e.g. \"fetch https://example.com\": " +
	"I'll ask to call the http_request tool, and a call that needs approval waits until someone approves, edits or rejects it.\n\n" +
	"To use a real model, set LLM_PROVIDER=openai with OPENAI_API_KEY " +
	"(or OPENAI_BASE_URL for a compatible server such as vLLM, Ollama's /v1 or LM Studio), " +
	"or LLM_PROVIDER=anthropic with ANTHROPIC_API_KEY; LLM_MODEL picks the model."

func assistantText(s string) Message { return Message{Role: RoleAssistant, Content: s} }

// answered reports whether a tool result follows the latest user message.
func answered(after []Message) bool {
	for _, m := range after {
		if m.Role == RoleTool {
			return true
		}
	}
	return false
}

func offered(tools []ToolDef, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// urlPattern finds http(s) URLs in plain text and in Slack's link markup
// (<https://example.com|example.com>): a URL ends at whitespace, <, >, |
// or a quote.
var urlPattern = regexp.MustCompile("https?://[^\\s<>|\"'`]+")

// findURL returns the first URL in s, without trailing punctuation that
// belongs to the sentence ("see https://example.com.").
func findURL(s string) string {
	u := urlPattern.FindString(s)
	for u != "" {
		last := u[len(u)-1]
		switch {
		case strings.IndexByte(".,;:!?*_~", last) >= 0:
		case last == ')' && strings.Count(u, "(") < strings.Count(u, ")"):
		default:
			return u
		}
		u = u[:len(u)-1]
	}
	return u
}

// getArguments is the http_request call for a GET of url. HTML escaping
// is off so that an & in the URL stays readable on the approval card.
func getArguments(url string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct { // two strings always encode
		Method string `json:"method"`
		URL    string `json:"url"`
	}{"GET", url})
	return strings.TrimSpace(b.String())
}

// demoSummary answers the tool results at the end of msgs.
func demoSummary(msgs []Message) string {
	start := len(msgs)
	for start > 0 && msgs[start-1].Role == RoleTool {
		start--
	}
	var parts []string
	for _, res := range msgs[start:] {
		parts = append(parts, summarise(res, callURL(msgs[:start], res.ToolCallID)))
	}
	return strings.Join(parts, "\n\n")
}

// callURL finds the URL of the call a result answers, for the summary.
func callURL(msgs []Message, id string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, c := range msgs[i].ToolCalls {
			if c.ID != id {
				continue
			}
			var args struct {
				URL string `json:"url"`
			}
			if json.Unmarshal([]byte(c.Arguments), &args) == nil && args.URL != "" {
				return args.URL
			}
			return ""
		}
	}
	return ""
}

func summarise(res Message, url string) string {
	text := strings.TrimSpace(res.Content)
	// A call a person edited before approving comes back with a note
	// first: "Note: <@U1> edited the arguments …; the call ran with {…}."
	edited := false
	if note, rest, ok := strings.Cut(text, "\n"); ok && strings.HasPrefix(note, "Note:") {
		if _, args, ok := strings.Cut(note, "the call ran with "); ok {
			var a struct {
				URL string `json:"url"`
			}
			if json.Unmarshal([]byte(strings.TrimSuffix(args, ".")), &a) == nil && a.URL != "" {
				url = a.URL
			}
			text, edited = strings.TrimSpace(rest), true
		}
	}
	target := "the request"
	if url != "" {
		target = "the request to " + url
	}
	if edited {
		target += " (with the arguments as edited)"
	}
	head := strings.ToLower(firstLine(text)) // failures say so up front; a body may say anything
	switch {
	case strings.HasPrefix(text, "Rejected by"):
		return fmt.Sprintf("OK, %s was not run. %s\nI won't try it again; ask me for something else if you like.",
			target, truncate(firstLine(text), 300))
	case res.IsError, strings.HasPrefix(head, "error"), strings.Contains(head, "timed out"),
		strings.Contains(head, "timeout"), strings.Contains(head, "expired"):
		return fmt.Sprintf("%s did not succeed: %s\nI won't retry it automatically; ask again if you want another attempt.",
			capitalise(target), truncate(firstLine(text), 300))
	case text == "":
		return fmt.Sprintf("%s returned nothing.", capitalise(target))
	}
	status, rest, _ := strings.Cut(text, "\n")
	reply := fmt.Sprintf("Done: %s returned %s", target, strings.TrimSpace(status))
	if excerpt := truncate(strings.Join(strings.Fields(rest), " "), 300); excerpt != "" {
		reply += "\n> " + excerpt
	}
	return reply
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
