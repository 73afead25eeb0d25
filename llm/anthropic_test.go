package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/anthropic"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

var _ llm.Model = (*llm.Anthropic)(nil)

func newAnthropic(t *testing.T, srv *llmtest.AnthropicServer) *llm.Anthropic {
	t.Helper()
	m, err := llm.NewAnthropic(llm.AnthropicOptions{APIKey: "sk-ant-test", BaseURL: srv.URL(), Model: "claude-test"})
	if err != nil {
		t.Fatalf("NewAnthropic() error = %v", err)
	}
	return m
}

// TestAnthropicParallelToolCalls runs one model turn with text and two
// tool calls, sends both results back, and gets the final answer.
func TestAnthropicParallelToolCalls(t *testing.T) {
	t.Parallel()
	callA := llmtest.Call("toolu_a", "http_request", argsA)
	callB := llmtest.Call("toolu_b", "http_request", argsB)
	srv := llmtest.NewAnthropicServer(t,
		llmtest.Reply("Let me check both.", callA, callB),
		llmtest.Reply("Both answered."),
	)
	m := newAnthropic(t, srv)
	ctx := context.Background()

	conv := []llm.Message{
		{Role: llm.RoleSystem, Content: "You are Countersign."},
		{Role: llm.RoleUser, Content: "Fetch a and post to b."},
	}
	got, err := m.Generate(ctx, conv, testTools)
	if err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	// Anthropic returns the input as an object; its JSON text may differ
	// from what was scripted, its value may not.
	if got.Role != llm.RoleAssistant || got.Content != "Let me check both." || len(got.ToolCalls) != 2 {
		t.Fatalf("Generate() = %+v, want text and two calls", got)
	}
	for i, want := range []llm.ToolCall{callA, callB} {
		c := got.ToolCalls[i]
		if c.ID != want.ID || c.Name != want.Name || !jsonEqual(json.RawMessage(c.Arguments), json.RawMessage(want.Arguments)) {
			t.Errorf("Generate() call %d = %+v, want %+v", i, c, want)
		}
	}

	conv = append(conv, got,
		llmtest.Result(got.ToolCalls[0], "200 OK\nhello"),
		llmtest.Result(got.ToolCalls[1], "Rejected by <@U1>: no"),
	)
	got, err = m.Generate(ctx, conv, testTools)
	if err != nil {
		t.Fatalf("Generate() after results error = %v", err)
	}
	if want := llmtest.Reply("Both answered."); !reflect.DeepEqual(got, want) {
		t.Fatalf("Generate() after results = %+v, want %+v", got, want)
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("server got %d requests, want 2", len(reqs))
	}
	first, second := reqs[0], reqs[1]
	if first.System != "You are Countersign." {
		t.Errorf("system = %q, want the system prompt", first.System)
	}
	if first.Model != "claude-test" || first.MaxTokens != llm.DefaultAnthropicMaxTokens {
		t.Errorf("model %q, max_tokens %d; want claude-test, %d", first.Model, first.MaxTokens, llm.DefaultAnthropicMaxTokens)
	}
	if key := first.Header.Get("X-Api-Key"); key != "sk-ant-test" {
		t.Errorf("x-api-key = %q, want the key", key)
	}
	if len(first.Tools) != 1 || first.Tools[0].Name != "http_request" || !jsonEqual(first.Tools[0].InputSchema, json.RawMessage(httpSchema)) {
		t.Errorf("tools = %+v, want http_request with its schema", first.Tools)
	}

	// Three turns: the user's, the assistant's text with both tool_use
	// blocks, and one user turn with both tool_result blocks.
	msgs := second.Messages
	if len(msgs) != 3 {
		t.Fatalf("second request has %d messages, want 3: %s", len(msgs), second.Body)
	}
	if m := msgs[0]; m.Role != "user" || len(m.Content) != 1 || m.Content[0].Text != "Fetch a and post to b." {
		t.Errorf("message 0 = %+v, want the user's request", m)
	}
	turn := msgs[1]
	if turn.Role != "assistant" || len(turn.Content) != 3 || turn.Content[0].Type != "text" || turn.Content[0].Text != "Let me check both." {
		t.Fatalf("message 1 = %+v, want text then two tool_use blocks", turn)
	}
	for i, want := range []llm.ToolCall{callA, callB} {
		b := turn.Content[i+1]
		if b.Type != "tool_use" || b.ID != want.ID || b.Name != want.Name || !jsonEqual(b.Input, json.RawMessage(want.Arguments)) {
			t.Errorf("message 1 block %d = %+v, want tool_use %+v", i+1, b, want)
		}
	}
	results := msgs[2]
	wantResults := []struct{ id, text string }{{"toolu_a", "200 OK\nhello"}, {"toolu_b", "Rejected by <@U1>: no"}}
	if results.Role != "user" || len(results.Content) != len(wantResults) {
		t.Fatalf("message 2 = %+v, want two tool_result blocks", results)
	}
	for i, want := range wantResults {
		b := results.Content[i]
		if b.Type != "tool_result" || b.ToolUseID != want.id || b.ResultText() != want.text {
			t.Errorf("message 2 block %d = %+v, want tool_result for %s with %q", i, b, want.id, want.text)
		}
	}
	for i, r := range reqs {
		if r.Status != http.StatusOK || r.Problem != "" {
			t.Errorf("request %d: status %d, problem %q; want 200", i, r.Status, r.Problem)
		}
	}
}

// TestLangchainAnthropicDropsParts documents why Anthropic groups
// messages itself: langchaingo's client, given an assistant message with
// text and two tool calls, keeps only the text, and the API rejects what
// follows.
func TestLangchainAnthropicDropsParts(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply("unused"))
	client, err := anthropic.New(anthropic.WithToken("k"), anthropic.WithBaseURL(srv.URL()))
	if err != nil {
		t.Fatalf("anthropic.New() error = %v", err)
	}
	call := func(id string) llms.ToolCall {
		return llms.ToolCall{ID: id, Type: "function", FunctionCall: &llms.FunctionCall{Name: "http_request", Arguments: "{}"}}
	}
	result := func(id string) llms.MessageContent {
		return llms.MessageContent{Role: llms.ChatMessageTypeTool, Parts: []llms.ContentPart{llms.ToolCallResponse{ToolCallID: id, Content: "ok"}}}
	}
	_, err = client.GenerateContent(context.Background(), []llms.MessageContent{
		llms.TextParts(llms.ChatMessageTypeHuman, "go"),
		{Role: llms.ChatMessageTypeAI, Parts: []llms.ContentPart{llms.TextContent{Text: "Checking."}, call("a"), call("b")}},
		result("a"),
		result("b"),
	})
	if err == nil {
		t.Fatal("langchaingo sent a multi-part assistant turn correctly; the workaround in Anthropic may be obsolete")
	}
	// The text survived, both tool_use blocks were dropped, and the
	// results went out as two user turns.
	if got := srv.Requests(); len(got) != 1 || !strings.Contains(got[0].Problem, "unexpected `tool_use_id`") {
		t.Fatalf("server requests = %+v, want one rejected for results without tool_use", got)
	}
}

func TestAnthropicUserTurnOrder(t *testing.T) {
	t.Parallel()
	// A reply in the thread while calls were pending lands after the
	// results (tool_result blocks must lead the user turn); several system
	// messages become one system prompt; blank messages are skipped.
	callA := llmtest.Call("toolu_a", "http_request", `{"url":"https://a.example"}`)
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply("ok"))
	conv := []llm.Message{
		{Role: llm.RoleSystem, Content: "Rule one."},
		{Role: llm.RoleUser, Content: "go"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{callA}},
		{Role: llm.RoleUser, Content: "actually, stop"},
		{Role: llm.RoleSystem, Content: "Rule two."},
		llmtest.Result(callA, "Rejected by <@U1>: actually, stop"),
		{Role: llm.RoleAssistant, Content: "  "},
	}
	if _, err := newAnthropic(t, srv).Generate(context.Background(), conv, nil); err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	req := srv.Requests()[0]
	if req.System != "Rule one.\n\nRule two." {
		t.Errorf("system = %q, want both rules", req.System)
	}
	var got []string
	for _, m := range req.Messages {
		var blocks []string
		for _, b := range m.Content {
			blocks = append(blocks, b.Type)
		}
		got = append(got, m.Role+":"+strings.Join(blocks, ","))
	}
	want := []string{"user:text", "assistant:tool_use", "user:tool_result,text"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("turns = %v, want %v", got, want)
	}
}

func TestAnthropicInvalidArgumentsInHistory(t *testing.T) {
	t.Parallel()
	// A call whose arguments were broken JSON (the agent answered it
	// with an error) must not make the conversation unsendable.
	bad := llmtest.Call("toolu_bad", "http_request", `{"url": "https://a.example"`)
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply("ok"))
	conv := []llm.Message{
		{Role: llm.RoleUser, Content: "go"},
		llmtest.Reply("", bad),
		llmtest.Result(bad, "error: arguments are not valid JSON"),
	}
	if _, err := newAnthropic(t, srv).Generate(context.Background(), conv, nil); err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	input := srv.Requests()[0].Messages[1].Content[0].Input
	want := json.RawMessage(`{"invalid_arguments":"{\"url\": \"https://a.example\""}`)
	if !jsonEqual(input, want) {
		t.Errorf("tool_use input = %s, want %s", input, want)
	}
}

func TestAnthropicEmptyReply(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply(""))
	got, err := newAnthropic(t, srv).Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil)
	if err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	if want := (llm.Message{Role: llm.RoleAssistant}); !reflect.DeepEqual(got, want) {
		t.Errorf("Generate() = %+v, want %+v", got, want)
	}
}

func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		status    int
		transient bool
	}{
		{"bad request", http.StatusBadRequest, false},
		{"unauthorized", http.StatusUnauthorized, false},
		{"rate limited", http.StatusTooManyRequests, true},
		{"server error", http.StatusInternalServerError, true},
		{"overloaded", 529, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewAnthropicServer(t)
			srv.FailNext(1, tt.status)
			_, err := newAnthropic(t, srv).Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil)
			var se *llm.StatusError
			if !errors.As(err, &se) || se.StatusCode != tt.status {
				t.Fatalf("Generate() error = %v, want a StatusError %d", err, tt.status)
			}
			if got := llm.IsTransient(err); got != tt.transient {
				t.Errorf("IsTransient(%v) = %v, want %v", err, got, tt.transient)
			}
			if strings.Contains(err.Error(), "sk-ant-test") {
				t.Errorf("error %q contains the API key", err)
			}
		})
	}
}

func TestNewAnthropicOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    llm.AnthropicOptions
		want    string
		wantErr bool
	}{
		{"defaults", llm.AnthropicOptions{APIKey: "k"}, "anthropic claude-sonnet-4-5", false},
		{"model", llm.AnthropicOptions{APIKey: "k", Model: "claude-opus-4-1"}, "anthropic claude-opus-4-1", false},
		{"base URL without /v1", llm.AnthropicOptions{APIKey: "k", BaseURL: "https://proxy.example/anthropic/"}, "anthropic claude-sonnet-4-5 at https://proxy.example/anthropic/v1", false},
		{"base URL with /v1", llm.AnthropicOptions{APIKey: "k", BaseURL: "https://proxy.example/v1"}, "anthropic claude-sonnet-4-5 at https://proxy.example/v1", false},
		{"no key", llm.AnthropicOptions{}, "", true},
		{"bad base URL", llm.AnthropicOptions{APIKey: "k", BaseURL: "ftp://x"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := llm.NewAnthropic(tt.opts)
			if (err != nil) != tt.wantErr {
				t.Fatalf("NewAnthropic(%+v) error = %v, want error %v", tt.opts, err, tt.wantErr)
			}
			if err == nil && m.Name() != tt.want {
				t.Errorf("NewAnthropic(%+v).Name() = %q, want %q", tt.opts, m.Name(), tt.want)
			}
		})
	}
}

func TestAnthropicBaseURLWithoutV1(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply("hi"))
	m, err := llm.NewAnthropic(llm.AnthropicOptions{BaseURL: strings.TrimSuffix(srv.URL(), "/v1")})
	if err != nil {
		t.Fatalf("NewAnthropic() error = %v", err)
	}
	if _, err := m.Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil); err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	req := srv.Requests()[0]
	if req.Path != "/v1/messages" {
		t.Errorf("path = %q, want /v1/messages", req.Path)
	}
	if key := req.Header.Get("X-Api-Key"); key != "" {
		t.Errorf("x-api-key = %q, want none without a key", key)
	}
}
