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
//   - If the latest user message names an offered tool ("use
//     everything__echo to say hi", "with files__read_file read
//     notes.txt"), and no tool result has answered it yet, it asks to
//     call that tool, with the arguments it can derive from the text
//     (see namedArguments) — any tool, an MCP server's <server>__<tool>
//     included, so that MCP can be tried without a model.
//   - Otherwise, if it contains an http(s) URL, it asks to GET it with
//     the http_request tool (when that tool is offered). Either way it is
//     one call, whose ID ("demo-<position>") depends only on the
//     conversation.
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
	text := msgs[lastUser].Content
	if t, start, end, ok := namedTool(text, tools); ok && t.Name != DemoToolName {
		args := namedArguments(t, text, start, end)
		return Message{
			Role:    RoleAssistant,
			Content: fmt.Sprintf("I'll call %s with %s.", t.Name, args),
			ToolCalls: []ToolCall{{
				ID:        fmt.Sprintf("demo-%d", len(msgs)),
				Name:      t.Name,
				Arguments: args,
			}},
		}, nil
	}
	url := findURL(text)
	if url == "" {
		if name := mcpStyleName.FindString(text); name != "" {
			return assistantText(fmt.Sprintf("I'd call %s, but no tool of that name is offered here, so I can't. "+
				"`bot tools` lists the tools that are; an MCP server's tools come from the policy file's mcp_servers.", name)), nil
		}
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
	"To try any other tool, an MCP server's included (MCP tools are named server__tool), name it in your request, " +
	"e.g. \"use everything__echo to say hi\" or \"with files__read_file read notes.txt\": " +
	"I'll call it with what I can take from the rest of the text. `bot tools` lists the tools offered.\n\n" +
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
		name, url := callOf(msgs[:start], res.ToolCallID)
		parts = append(parts, summarise(res, name, url))
	}
	return strings.Join(parts, "\n\n")
}

// callOf finds the tool and the URL (if any) of the call a result
// answers, for the summary.
func callOf(msgs []Message, id string) (name, url string) {
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, c := range msgs[i].ToolCalls {
			if c.ID != id {
				continue
			}
			var args struct {
				URL string `json:"url"`
			}
			if json.Unmarshal([]byte(c.Arguments), &args) == nil && args.URL != "" {
				return c.Name, args.URL
			}
			return c.Name, ""
		}
	}
	return "", ""
}

func summarise(res Message, name, url string) string {
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
	other := name != "" && name != DemoToolName // not an HTTP request: no status line
	target := "the request"
	switch {
	case other:
		target = "the " + name + " call"
	case url != "":
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
	if other {
		return fmt.Sprintf("Done: %s returned:\n> %s", target, truncate(strings.Join(strings.Fields(text), " "), 300))
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

// mcpStyleName finds a name shaped like an MCP tool's, <server>__<tool>.
var mcpStyleName = regexp.MustCompile(`[A-Za-z0-9][A-Za-z0-9_-]*__[A-Za-z0-9][A-Za-z0-9_-]*`)

// isNameByte reports whether b can be part of a tool name, so that a
// name is only found as a whole word ("echo" is not in "everything__echo").
func isNameByte(b byte) bool {
	return b == '_' || b == '-' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// namedTool finds the offered tool that text names first, the longer
// name when two start at the same place, and where its name is.
func namedTool(text string, tools []ToolDef) (t ToolDef, start, end int, ok bool) {
	start = len(text) + 1
	for _, c := range tools {
		if c.Name == "" {
			continue
		}
		for from := 0; from < len(text); {
			i := strings.Index(text[from:], c.Name)
			if i < 0 {
				break
			}
			i += from
			j := i + len(c.Name)
			if (i == 0 || !isNameByte(text[i-1])) && (j == len(text) || !isNameByte(text[j])) {
				if i < start || i == start && j > end {
					t, start, end, ok = c, i, j, true
				}
				break
			}
			from = i + 1
		}
	}
	return t, start, end, ok
}

// namedArguments derives a call's arguments from the request that names
// the tool, as a best effort from the schema: each required string
// property gets the rest of the request ("use everything__echo to say
// hi" gives "hi"), except that a property whose name says path, file or
// dir gets the word that looks like a path ("notes.txt"), and one that
// says url or uri the request's URL. Other properties are left out; the
// call's validation says what is missing.
func namedArguments(t ToolDef, text string, start, end int) string {
	var schema struct {
		Properties map[string]struct {
			Type json.RawMessage `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(t.Parameters, &schema) // a schema that does not parse asks for nothing
	rest := requestRest(text, start, end)
	args := map[string]string{}
	for _, name := range schema.Required {
		p, ok := schema.Properties[name]
		if !ok || !isStringType(p.Type) {
			continue
		}
		lower := strings.ToLower(name)
		switch {
		case strings.Contains(lower, "url") || strings.Contains(lower, "uri"):
			if u := findURL(text); u != "" {
				args[name] = u
				continue
			}
			args[name] = rest
		case strings.Contains(lower, "path") || strings.Contains(lower, "file") || strings.Contains(lower, "dir"):
			args[name] = pathIn(rest)
		default:
			args[name] = rest
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(args) // a map of strings always encodes
	return strings.TrimSpace(b.String())
}

// isStringType reports whether a JSON schema "type" allows a string.
func isStringType(raw json.RawMessage) bool {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one == "string"
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		for _, s := range many {
			if s == "string" {
				return true
			}
		}
	}
	return false
}

// Words that join a tool's name to what it should do: "use X to say hi",
// "say hi with X".
var (
	leadingFiller  = map[string]bool{"to": true, "and": true, "then": true, "say": true, "saying": true, "please": true, "with": true, "for": true, "on": true}
	trailingFiller = map[string]bool{"use": true, "using": true, "with": true, "via": true, "call": true, "run": true, "the": true, "tool": true, "by": true, "through": true}
)

// requestRest is what the request asks of the tool named at
// text[start:end]: the words after the name without the ones that join
// it, or, when nothing follows, the words before it.
func requestRest(text string, start, end int) string {
	trim := func(s string) string { return strings.Trim(s, " \t\r\n:,;-—`'\"") }
	words := strings.Fields(trim(text[end:]))
	for len(words) > 0 && leadingFiller[strings.ToLower(trim(words[0]))] {
		words = words[1:]
	}
	if len(words) == 0 {
		words = strings.Fields(trim(text[:start]))
		for len(words) > 0 && trailingFiller[strings.ToLower(trim(words[len(words)-1]))] {
			words = words[:len(words)-1]
		}
		for len(words) > 0 && leadingFiller[strings.ToLower(trim(words[0]))] {
			words = words[1:]
		}
	}
	return trim(strings.Join(words, " "))
}

// pathIn returns the first word of s that looks like a path (it has a /
// or a dot inside), else its last word.
func pathIn(s string) string {
	words := strings.Fields(s)
	for _, w := range words {
		w = strings.TrimRight(strings.Trim(w, "`'\"()"), ".,;:!?")
		if strings.ContainsAny(w, "/.") {
			return w
		}
	}
	if len(words) == 0 {
		return ""
	}
	return strings.TrimRight(strings.Trim(words[len(words)-1], "`'\"()"), ".,;:!?")
}
