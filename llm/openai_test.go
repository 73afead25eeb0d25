package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

var _ llm.Model = (*llm.OpenAI)(nil)

const httpSchema = `{"type":"object","properties":{"method":{"type":"string"},"url":{"type":"string"}},"required":["method","url"]}`

var testTools = []llm.ToolDef{{
	Name:        "http_request",
	Description: "Make an HTTP request.",
	Parameters:  json.RawMessage(httpSchema),
}}

// Arguments a model may produce, kept byte for byte: key order, spacing
// and escapes included.
const (
	argsA = `{"url": "https://a.example/x?q=1&r=2", "method":"GET"}`
	argsB = `{"method":"POST","url":"https://b.example/","body":"{\"n\":1}"}`
)

func newOpenAI(t *testing.T, srv *llmtest.OpenAIServer) *llm.OpenAI {
	t.Helper()
	m, err := llm.NewOpenAI(llm.OpenAIOptions{APIKey: "sk-test", BaseURL: srv.URL(), Model: "gpt-test"})
	if err != nil {
		t.Fatalf("NewOpenAI() error = %v", err)
	}
	return m
}

// TestOpenAIParallelToolCalls runs one model turn with text and two tool
// calls, sends both results back, and gets the final answer.
func TestOpenAIParallelToolCalls(t *testing.T) {
	t.Parallel()
	callA := llmtest.Call("call_a", "http_request", argsA)
	callB := llmtest.Call("call_b", "http_request", argsB)
	srv := llmtest.NewOpenAIServer(t,
		llmtest.Reply("Let me check both.", callA, callB),
		llmtest.Reply("Both answered."),
	)
	m := newOpenAI(t, srv)
	ctx := context.Background()

	conv := []llm.Message{
		{Role: llm.RoleSystem, Content: "You are Countersign."},
		{Role: llm.RoleUser, Content: "Fetch a and post to b."},
	}
	got, err := m.Generate(ctx, conv, testTools)
	if err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	want := llmtest.Reply("Let me check both.", callA, callB)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Generate() = %+v, want %+v", got, want)
	}

	conv = append(conv, got,
		llmtest.Result(callA, "200 OK\nhello"),
		llm.Message{Role: llm.RoleTool, ToolCallID: "call_b", Name: "http_request", Content: "Rejected by <@U1>: no", IsError: true},
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
	if first.Model != "gpt-test" {
		t.Errorf("model = %q, want %q", first.Model, "gpt-test")
	}
	if auth := first.Header.Get("Authorization"); auth != "Bearer sk-test" {
		t.Errorf("Authorization = %q, want %q", auth, "Bearer sk-test")
	}
	if len(first.Tools) != 1 || first.Tools[0].Type != "function" || first.Tools[0].Function.Name != "http_request" {
		t.Fatalf("tools = %+v, want one function http_request", first.Tools)
	}
	if !jsonEqual(first.Tools[0].Function.Parameters, json.RawMessage(httpSchema)) {
		t.Errorf("tool parameters = %s, want %s", first.Tools[0].Function.Parameters, httpSchema)
	}
	if msg := first.Messages[0]; msg.Role != "system" || msg.Text() != "You are Countersign." {
		t.Errorf("first message = %s %q, want the system prompt", msg.Role, msg.Text())
	}

	// The second request carries the whole turn: the assistant message
	// with both calls, arguments intact, then one tool message per result.
	type sent struct {
		role, text, toolCallID string
		calls                  []llmtest.OpenAIToolCall
	}
	var gotSent []sent
	for _, msg := range second.Messages {
		gotSent = append(gotSent, sent{msg.Role, msg.Text(), msg.ToolCallID, msg.ToolCalls})
	}
	wantSent := []sent{
		{role: "system", text: "You are Countersign."},
		{role: "user", text: "Fetch a and post to b."},
		{role: "assistant", text: "Let me check both.", calls: []llmtest.OpenAIToolCall{
			{ID: "call_a", Type: "function", Function: llmtest.OpenAIFunctionCall{Name: "http_request", Arguments: argsA}},
			{ID: "call_b", Type: "function", Function: llmtest.OpenAIFunctionCall{Name: "http_request", Arguments: argsB}},
		}},
		{role: "tool", text: "200 OK\nhello", toolCallID: "call_a"},
		{role: "tool", text: "Rejected by <@U1>: no", toolCallID: "call_b"},
	}
	if !reflect.DeepEqual(gotSent, wantSent) {
		t.Errorf("second request messages =\n%+v\nwant\n%+v", gotSent, wantSent)
	}
	for i, r := range reqs {
		if r.Status != http.StatusOK || r.Problem != "" {
			t.Errorf("request %d: status %d, problem %q; want 200", i, r.Status, r.Problem)
		}
	}
}

func TestOpenAIToolCallOnly(t *testing.T) {
	t.Parallel()
	// A turn with calls and no text, and a call the server sends without
	// an ID or arguments (some compatible servers do).
	srv := llmtest.NewOpenAIServer(t,
		llmtest.Reply("", llmtest.Call("", "list", "")),
		llmtest.Reply("done"),
	)
	m := newOpenAI(t, srv)
	conv := []llm.Message{{Role: llm.RoleUser, Content: "list"}}
	got, err := m.Generate(context.Background(), conv, []llm.ToolDef{{Name: "list", Description: "List things."}})
	if err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	// The fake names the call after the request; the client fills in "{}".
	want := llmtest.Reply("", llmtest.Call("call_1_0", "list", "{}"))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Generate() = %+v, want %+v", got, want)
	}
	conv = append(conv, got, llmtest.Result(got.ToolCalls[0], "a, b"))
	if _, err := m.Generate(context.Background(), conv, nil); err != nil {
		t.Fatalf("Generate() after result error = %v", err)
	}
	if params := srv.Requests()[0].Tools[0].Function.Parameters; !jsonEqual(params, json.RawMessage(`{"type":"object","properties":{}}`)) {
		t.Errorf("parameters of a tool without schema = %s, want an empty object schema", params)
	}
}

func TestOpenAIWithoutKey(t *testing.T) {
	t.Parallel()
	// A compatible server without auth, and a base URL without /v1.
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("hi"))
	m, err := llm.NewOpenAI(llm.OpenAIOptions{BaseURL: strings.TrimSuffix(srv.URL(), "/v1")})
	if err != nil {
		t.Fatalf("NewOpenAI() error = %v", err)
	}
	if _, err := m.Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil); err != nil {
		t.Fatalf("Generate() error = %v", err)
	}
	req := srv.Requests()[0]
	if auth := req.Header.Get("Authorization"); auth != "" {
		t.Errorf("Authorization = %q, want none", auth)
	}
	if req.Path != "/chat/completions" || req.Model != llm.DefaultOpenAIModel {
		t.Errorf("request to %s for %q, want /chat/completions for %q", req.Path, req.Model, llm.DefaultOpenAIModel)
	}
	if !strings.HasPrefix(m.Name(), "openai "+llm.DefaultOpenAIModel+" at http://127.0.0.1") {
		t.Errorf("Name() = %q, want the model and server", m.Name())
	}
}

func TestOpenAIErrors(t *testing.T) {
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
		{"unavailable", http.StatusServiceUnavailable, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewOpenAIServer(t)
			srv.FailNext(1, tt.status)
			_, err := newOpenAI(t, srv).Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil)
			var se *llm.StatusError
			if !errors.As(err, &se) || se.StatusCode != tt.status {
				t.Fatalf("Generate() error = %v, want a StatusError %d", err, tt.status)
			}
			if !strings.Contains(se.Message, "scripted failure") {
				t.Errorf("StatusError.Message = %q, want the server's message", se.Message)
			}
			if got := llm.IsTransient(err); got != tt.transient {
				t.Errorf("IsTransient(%v) = %v, want %v", err, got, tt.transient)
			}
			if strings.Contains(err.Error(), "sk-test") {
				t.Errorf("error %q contains the API key", err)
			}
		})
	}
}

func TestOpenAINetworkError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	m, err := llm.NewOpenAI(llm.OpenAIOptions{APIKey: "sk-test", BaseURL: url + "/v1"})
	if err != nil {
		t.Fatalf("NewOpenAI() error = %v", err)
	}
	_, err = m.Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil)
	if err == nil || !llm.IsTransient(err) {
		t.Fatalf("Generate() against a closed server error = %v, want a transient error", err)
	}
}

func TestOpenAICancelled(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("hi"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newOpenAI(t, srv).Generate(ctx, []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Generate() with a cancelled context error = %v, want context.Canceled", err)
	}
}

func TestOpenAIRejectsBadInput(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t)
	m := newOpenAI(t, srv)
	tests := []struct {
		name string
		msgs []llm.Message
	}{
		{"no messages", nil},
		{"unknown role", []llm.Message{{Role: "robot", Content: "x"}}},
		{"tool result without call ID", []llm.Message{{Role: llm.RoleTool, Content: "x"}}},
		{"call without ID", []llm.Message{{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{Name: "x"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := m.Generate(context.Background(), tt.msgs, nil); err == nil {
				t.Errorf("Generate(%+v) error = nil, want an error", tt.msgs)
			}
		})
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("server got %d requests, want none", n)
	}
}

func TestNewOpenAIOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    llm.OpenAIOptions
		want    string
		wantErr bool
	}{
		{"defaults", llm.OpenAIOptions{APIKey: "k"}, "openai gpt-4o-mini", false},
		{"model", llm.OpenAIOptions{APIKey: "k", Model: "gpt-4.1"}, "openai gpt-4.1", false},
		{"password in base URL is not shown", llm.OpenAIOptions{BaseURL: "http://u:secret@localhost:8000/v1"}, "openai gpt-4o-mini at http://u:xxxxx@localhost:8000/v1", false},
		{"nothing", llm.OpenAIOptions{}, "", true},
		{"relative base URL", llm.OpenAIOptions{APIKey: "k", BaseURL: "localhost:8000"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := llm.NewOpenAI(tt.opts)
			if (err != nil) != tt.wantErr {
				t.Fatalf("NewOpenAI(%+v) error = %v, want error %v", tt.opts, err, tt.wantErr)
			}
			if err == nil && m.Name() != tt.want {
				t.Errorf("NewOpenAI(%+v).Name() = %q, want %q", tt.opts, m.Name(), tt.want)
			}
		})
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
