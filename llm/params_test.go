package llm_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// temperatureOf returns the temperature of a request body, or nil.
func temperatureOf(t *testing.T, body json.RawMessage) *float64 {
	t.Helper()
	var req struct {
		Temperature *float64 `json:"temperature"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	return req.Temperature
}

// A reasoning model never gets a temperature (the fake refuses it as
// OpenAI does); LLM_TEMPERATURE unset sends none at all; set, it is sent
// to the models that take it.
func TestTemperatureFitsTheModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		provider, model, temperature string
		want                         *float64
	}{
		{"openai", "o4-mini", "", nil},
		{"openai", "o4-mini", "0.2", nil},
		{"openai", "o1", "0", nil},
		{"openai", "o3-mini-2025-01-31", "0", nil},
		{"openai", "gpt-5-mini", "0.7", nil},
		{"openai", "gpt-4o-mini", "", nil},
		{"openai", "gpt-4o-mini", "0", ptr(0)},
		{"openai", "gpt-4o-mini", "0.2", ptr(0.2)},
		{"anthropic", "claude-sonnet-4-5", "", nil},
		{"anthropic", "claude-sonnet-4-5", "0.5", ptr(0.5)},
	}
	for _, tt := range tests {
		t.Run(tt.provider+" "+tt.model+" "+tt.temperature, func(t *testing.T) {
			env := map[string]string{"LLM_PROVIDER": tt.provider, "LLM_MODEL": tt.model, "LLM_TEMPERATURE": tt.temperature}
			var bodies func() []json.RawMessage
			if tt.provider == "openai" {
				srv := llmtest.NewOpenAIServer(t, llmtest.Reply("ok"), llmtest.Reply("ok"))
				env["OPENAI_BASE_URL"] = srv.URL()
				bodies = func() (out []json.RawMessage) {
					for _, r := range srv.Requests() {
						out = append(out, r.Body)
					}
					return out
				}
			} else {
				srv := llmtest.NewAnthropicServer(t, llmtest.Reply("ok"), llmtest.Reply("ok"))
				env["ANTHROPIC_BASE_URL"] = srv.URL()
				bodies = func() (out []json.RawMessage) {
					for _, r := range srv.Requests() {
						out = append(out, r.Body)
					}
					return out
				}
			}
			m, err := llm.FromEnv(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			msgs := []llm.Message{user("hi")}
			if _, err := m.Generate(context.Background(), msgs, nil); err != nil {
				t.Fatalf("Generate() = %v", err)
			}
			if _, err := llm.Stream(context.Background(), m, msgs, nil, func(context.Context, string) error { return nil }); err != nil {
				t.Fatalf("Stream() = %v", err)
			}
			for i, b := range bodies() {
				got := temperatureOf(t, b)
				if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
					t.Errorf("request %d temperature = %v, want %v", i+1, show(got), show(tt.want))
				}
			}
		})
	}
	for _, env := range []map[string]string{
		{"OPENAI_API_KEY": "sk-1", "LLM_TEMPERATURE": "warm"},
		{"OPENAI_API_KEY": "sk-1", "LLM_TEMPERATURE": "2.5"},
		{"ANTHROPIC_API_KEY": "sk-ant-1", "LLM_TEMPERATURE": "1.5"},
	} {
		if _, err := llm.FromEnv(func(k string) string { return env[k] }); err == nil {
			t.Errorf("FromEnv(%v) error = nil, want one", env)
		}
	}
}

func ptr(f float64) *float64 { return &f }

func show(f *float64) any {
	if f == nil {
		return "none"
	}
	return *f
}

// Anthropic is told which tool results report a failure.
func TestAnthropicIsError(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply("ok"))
	m, err := llm.NewAnthropic(llm.AnthropicOptions{BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	a, b := llmtest.Call("toolu_a", "f", `{}`), llmtest.Call("toolu_b", "f", `{}`)
	msgs := []llm.Message{user("go"), llmtest.Reply("", a, b),
		{Role: llm.RoleTool, ToolCallID: "toolu_a", Name: "f", Content: "fine"},
		{Role: llm.RoleTool, ToolCallID: "toolu_b", Name: "f", Content: "Error: it broke", IsError: true}}
	if _, err := m.Generate(context.Background(), msgs, nil); err != nil {
		t.Fatalf("Generate() = %v", err)
	}
	got := map[string]bool{}
	for _, blk := range srv.Requests()[0].Messages[2].Content {
		got[blk.ToolUseID] = blk.IsError
	}
	if got["toolu_a"] || !got["toolu_b"] {
		t.Errorf("is_error sent = %v, want only toolu_b", got)
	}
}
