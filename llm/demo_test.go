package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
)

var _ llm.Model = (*llm.Demo)(nil)

func user(s string) llm.Message { return llm.Message{Role: llm.RoleUser, Content: s} }

func TestDemoAsksToFetch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		msgs    []llm.Message
		wantURL string
		wantID  string
	}{
		{"plain URL", []llm.Message{user("fetch https://example.com/status")}, "https://example.com/status", "demo-1"},
		{"after a system prompt", []llm.Message{{Role: llm.RoleSystem, Content: "be brief"}, user("get http://127.0.0.1:8080/x?a=1&b=2 please")}, "http://127.0.0.1:8080/x?a=1&b=2", "demo-2"},
		{"Slack link markup", []llm.Message{user("fetch <https://example.com/a|example.com/a>")}, "https://example.com/a", "demo-1"},
		{"sentence punctuation", []llm.Message{user("Can you check https://example.com/health?")}, "https://example.com/health", "demo-1"},
		{"parenthesised", []llm.Message{user("(see https://en.wikipedia.org/wiki/Go_(programming_language))")}, "https://en.wikipedia.org/wiki/Go_(programming_language)", "demo-1"},
		{"first of two", []llm.Message{user("https://a.example and https://b.example")}, "https://a.example", "demo-1"},
		{
			"a new turn after a finished one",
			[]llm.Message{
				user("fetch https://a.example"),
				{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "demo-1", Name: "http_request", Arguments: `{}`}}},
				{Role: llm.RoleTool, ToolCallID: "demo-1", Content: "200 OK"},
				{Role: llm.RoleAssistant, Content: "Done."},
				user("now https://b.example"),
			},
			"https://b.example", "demo-5",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := llm.NewDemo().Generate(context.Background(), tt.msgs, testTools)
			if err != nil {
				t.Fatalf("Generate() error = %v", err)
			}
			if got.Role != llm.RoleAssistant || got.Content == "" || len(got.ToolCalls) != 1 {
				t.Fatalf("Generate() = %+v, want text and one tool call", got)
			}
			c := got.ToolCalls[0]
			if c.ID != tt.wantID || c.Name != "http_request" {
				t.Errorf("Generate() call = %s %s, want %s http_request", c.ID, c.Name, tt.wantID)
			}
			var args map[string]string
			if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
				t.Fatalf("Generate() arguments %q are not JSON: %v", c.Arguments, err)
			}
			if want := map[string]string{"method": "GET", "url": tt.wantURL}; !reflect.DeepEqual(args, want) {
				t.Errorf("Generate() arguments = %v, want %v", args, want)
			}
			if strings.Contains(c.Arguments, `\u0026`) {
				t.Errorf("Generate() arguments = %s, want & unescaped", c.Arguments)
			}
			// A replay of the same conversation gets the same reply.
			again, _ := llm.NewDemo().Generate(context.Background(), tt.msgs, testTools)
			if !reflect.DeepEqual(again, got) {
				t.Errorf("Generate() replayed = %+v, want %+v", again, got)
			}
		})
	}
}

func TestDemoAfterToolResult(t *testing.T) {
	t.Parallel()
	call := llm.ToolCall{ID: "demo-1", Name: "http_request", Arguments: `{"method":"GET","url":"https://example.com"}`}
	conv := func(result llm.Message) []llm.Message {
		result.Role, result.ToolCallID, result.Name = llm.RoleTool, call.ID, call.Name
		return []llm.Message{
			user("fetch https://example.com"),
			{Role: llm.RoleAssistant, Content: "I'll fetch it.", ToolCalls: []llm.ToolCall{call}},
			result,
		}
	}
	tests := []struct {
		name   string
		result llm.Message
		want   []string
	}{
		{"success", llm.Message{Content: "HTTP 200 OK\n\n<html>\n  <title>Example Domain</title>"}, []string{"https://example.com", "HTTP 200 OK", "<title>Example Domain</title>"}},
		{"rejected", llm.Message{Content: "Rejected by <@U42>: not today"}, []string{"not run", "Rejected by <@U42>: not today", "won't try it again"}},
		{"error flag", llm.Message{Content: "dial tcp: connection refused", IsError: true}, []string{"did not succeed", "connection refused", "won't retry"}},
		{"timed out", llm.Message{Content: "Timed out: nobody decided within 24h"}, []string{"did not succeed", "Timed out", "won't retry"}},
		{"error text", llm.Message{Content: "error: host not allowed"}, []string{"did not succeed", "host not allowed"}},
		{"empty", llm.Message{}, []string{"returned nothing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := llm.NewDemo().Generate(context.Background(), conv(tt.result), testTools)
			if err != nil {
				t.Fatalf("Generate() error = %v", err)
			}
			if len(got.ToolCalls) != 0 {
				t.Errorf("Generate() = %+v, want no tool call after a result", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got.Content, w) {
					t.Errorf("Generate() = %q, want it to contain %q", got.Content, w)
				}
			}
		})
	}
}

func TestDemoLongResultIsShortened(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("lorem ipsum ", 500)
	conv := []llm.Message{
		user("fetch https://example.com"),
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "demo-1", Name: "http_request", Arguments: `{}`}}},
		{Role: llm.RoleTool, ToolCallID: "demo-1", Content: "200 OK\n" + body},
	}
	got, err := llm.NewDemo().Generate(context.Background(), conv, testTools)
	if err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	if n := len(got.Content); n > 500 {
		t.Errorf("Generate() reply is %d bytes, want a short excerpt", n)
	}
}

func TestDemoOtherwiseExplains(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		msgs  []llm.Message
		tools []llm.ToolDef
		want  []string
	}{
		{"no URL", []llm.Message{user("what's the weather?")}, testTools,
			[]string{"offline demo", "fetch a URL", "LLM_PROVIDER=openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "LLM_MODEL"}},
		{"no conversation", nil, testTools, []string{"offline demo"}},
		{"tool not offered", []llm.Message{user("fetch https://example.com")}, nil, []string{"https://example.com", "http_request", "isn't available"}},
		{"already answered", []llm.Message{
			user("fetch https://example.com"),
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "demo-1", Name: "http_request", Arguments: `{}`}}},
			{Role: llm.RoleTool, ToolCallID: "demo-1", Content: "200 OK"},
			{Role: llm.RoleAssistant, Content: "Done."},
		}, testTools, []string{"offline demo"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := llm.NewDemo().Generate(context.Background(), tt.msgs, tt.tools)
			if err != nil {
				t.Fatalf("Generate() error = %v", err)
			}
			if got.Role != llm.RoleAssistant || len(got.ToolCalls) != 0 {
				t.Errorf("Generate() = %+v, want an assistant text", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got.Content, w) {
					t.Errorf("Generate() = %q, want it to contain %q", got.Content, w)
				}
			}
		})
	}
}

func TestDemoNameAndContext(t *testing.T) {
	t.Parallel()
	d := llm.NewDemo()
	if got := d.Name(); got != "demo (offline)" {
		t.Errorf("Name() = %q, want %q", got, "demo (offline)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Generate(ctx, []llm.Message{user("hi")}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Generate() with a cancelled context error = %v, want context.Canceled", err)
	}
}

func TestDemoSummarisesAnEditedCall(t *testing.T) {
	t.Parallel()
	msgs := []llm.Message{
		{Role: llm.RoleUser, Content: "fetch https://example.com/old"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "demo-1", Name: "http_request", Arguments: `{"method":"GET","url":"https://example.com/old"}`}}},
		{Role: llm.RoleTool, ToolCallID: "demo-1", Name: "http_request",
			Content: "Note: <@U1> edited the arguments before approving; the call ran with {\"method\":\"GET\",\"url\":\"https://example.com/new\"}.\nHTTP 200 OK\n\nnew page"},
	}
	got, err := llm.NewDemo().Generate(context.Background(), msgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.Content, "https://example.com/new (with the arguments as edited) returned HTTP 200 OK") ||
		strings.Contains(got.Content, "Note:") || strings.Contains(got.Content, "/old") {
		t.Errorf("Generate() = %q; want the edited URL's result, without the note", got.Content)
	}
}

// mcpTools are tools as MCP servers offer them, beside http_request.
var mcpTools = append([]llm.ToolDef{
	{Name: "everything__echo", Parameters: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`)},
	{Name: "files__read_file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"head":{"type":"number"}},"required":["path"]}`)},
	{Name: "files__read_file_lines", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"from":{"type":"integer"}},"required":["path","from"]}`)},
	{Name: "web__fetch", Parameters: json.RawMessage(`{"type":"object","properties":{"url":{"type":["string","null"]},"note":{"type":"string"}},"required":["url","note"]}`)},
}, testTools...)

func TestDemoCallsANamedTool(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text     string
		wantName string
		wantArgs map[string]string
	}{
		{"use everything__echo to say hi", "everything__echo", map[string]string{"message": "hi"}},
		{"with files__read_file read notes.txt", "files__read_file", map[string]string{"path": "notes.txt"}},
		{"please read ./docs/a.md with `files__read_file`", "files__read_file", map[string]string{"path": "./docs/a.md"}},
		{"say hello there using everything__echo", "everything__echo", map[string]string{"message": "hello there"}},
		{"files__read_file_lines of notes.txt", "files__read_file_lines", map[string]string{"path": "notes.txt"}},
		{"web__fetch https://example.com/a, it's the status page", "web__fetch", map[string]string{"url": "https://example.com/a", "note": "https://example.com/a, it's the status page"}},
		{"everything__echo: https://example.com", "everything__echo", map[string]string{"message": "https://example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			msgs := []llm.Message{user(tt.text)}
			got, err := llm.NewDemo().Generate(context.Background(), msgs, mcpTools)
			if err != nil {
				t.Fatalf("Generate() error = %v", err)
			}
			if len(got.ToolCalls) != 1 {
				t.Fatalf("Generate() = %+v, want one tool call", got)
			}
			c := got.ToolCalls[0]
			if c.Name != tt.wantName || c.ID != "demo-1" {
				t.Errorf("Generate() call = %s %s, want demo-1 %s", c.ID, c.Name, tt.wantName)
			}
			var args map[string]string
			if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
				t.Fatalf("Generate() arguments %q are not JSON: %v", c.Arguments, err)
			}
			if !reflect.DeepEqual(args, tt.wantArgs) {
				t.Errorf("Generate() arguments = %v, want %v", args, tt.wantArgs)
			}
			if !strings.Contains(got.Content, tt.wantName) {
				t.Errorf("Generate() text = %q, want it to name %s", got.Content, tt.wantName)
			}
		})
	}
}

func TestDemoNamedToolNotOffered(t *testing.T) {
	t.Parallel()
	got, err := llm.NewDemo().Generate(context.Background(), []llm.Message{user("use everything__echo to say hi")}, testTools)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ToolCalls) != 0 || !strings.Contains(got.Content, "everything__echo") || !strings.Contains(got.Content, "bot tools") {
		t.Errorf("Generate() = %+v, want no call and a pointer to bot tools", got)
	}
	// A name inside a longer word is not a request for it.
	got, _ = llm.NewDemo().Generate(context.Background(), []llm.Message{user("x_everything__echo_y")}, mcpTools)
	if len(got.ToolCalls) != 0 {
		t.Errorf("Generate() = %+v, want no call for a name inside a word", got)
	}
}

func TestDemoSummarisesANamedToolCall(t *testing.T) {
	t.Parallel()
	msgs := []llm.Message{
		user("use everything__echo to say hi"),
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "demo-1", Name: "everything__echo", Arguments: `{"message":"hi"}`}}},
		{Role: llm.RoleTool, ToolCallID: "demo-1", Name: "everything__echo", Content: "Echo: hi"},
	}
	got, err := llm.NewDemo().Generate(context.Background(), msgs, mcpTools)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Done: the everything__echo call returned:\n> Echo: hi"; got.Content != want || len(got.ToolCalls) != 0 {
		t.Errorf("Generate() = %+v, want %q", got, want)
	}
}

func TestDemoHelpNamesMCP(t *testing.T) {
	t.Parallel()
	got, _ := llm.NewDemo().Generate(context.Background(), []llm.Message{user("help")}, testTools)
	for _, w := range []string{"MCP", "server__tool", "use everything__echo to say hi", "bot tools"} {
		if !strings.Contains(got.Content, w) {
			t.Errorf("help = %q, want it to contain %q", got.Content, w)
		}
	}
}
