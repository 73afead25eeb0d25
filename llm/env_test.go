package llm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

func TestFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		env      map[string]string
		wantName string // prefix of Name()
		wantErr  string // part of the error
	}{
		{"nothing set", nil, "demo (offline)", ""},
		{"openai key", map[string]string{"OPENAI_API_KEY": "sk-1"}, "openai gpt-4o-mini", ""},
		{"openai base URL only", map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1", "LLM_MODEL": "llama3.1"}, "openai llama3.1 at http://localhost:11434/v1", ""},
		{"anthropic key", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1"}, "anthropic claude-sonnet-4-5", ""},
		{"openai wins when both keys are set", map[string]string{"OPENAI_API_KEY": "sk-1", "ANTHROPIC_API_KEY": "sk-ant-1"}, "openai ", ""},
		{"provider picks anthropic", map[string]string{"LLM_PROVIDER": "anthropic", "OPENAI_API_KEY": "sk-1", "ANTHROPIC_API_KEY": "sk-ant-1"}, "anthropic ", ""},
		{"provider is case-insensitive", map[string]string{"LLM_PROVIDER": " OpenAI ", "OPENAI_API_KEY": "sk-1"}, "openai ", ""},
		{"model override", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "LLM_MODEL": "claude-opus-4-1"}, "anthropic claude-opus-4-1", ""},
		{"anthropic base URL", map[string]string{"LLM_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "https://proxy.example"}, "anthropic claude-sonnet-4-5 at https://proxy.example/v1", ""},
		{"demo despite keys", map[string]string{"LLM_PROVIDER": "demo", "OPENAI_API_KEY": "sk-1"}, "demo (offline)", ""},
		{"openai without key", map[string]string{"LLM_PROVIDER": "openai"}, "", "OPENAI_API_KEY"},
		{"anthropic without key", map[string]string{"LLM_PROVIDER": "anthropic", "OPENAI_API_KEY": "sk-1"}, "", "ANTHROPIC_API_KEY"},
		{"unknown provider", map[string]string{"LLM_PROVIDER": "gemini"}, "", `"gemini"`},
		{"key in the wrong variable", map[string]string{"LLM_PROVIDER": "sk-secret-0123456789abcdefghijklmnopqrstuvwxyz"}, "", "unknown provider"},
		{"bad base URL", map[string]string{"OPENAI_API_KEY": "sk-secret", "OPENAI_BASE_URL": "localhost:1234"}, "", "OPENAI_BASE_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			m, err := llm.FromEnv(getenv)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("FromEnv(%v) error = %v, want one mentioning %s", tt.env, err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "sk-") {
					t.Errorf("FromEnv(%v) error = %q, contains a key", tt.env, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromEnv(%v) error = %v", tt.env, err)
			}
			if !strings.HasPrefix(m.Name(), tt.wantName) {
				t.Errorf("FromEnv(%v).Name() = %q, want prefix %q", tt.env, m.Name(), tt.wantName)
			}
		})
	}
}

func TestFromEnvTalksToServer(t *testing.T) {
	t.Parallel()
	// The setup an end-to-end test uses: OPENAI_BASE_URL at the fake.
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("hi from the fake"))
	env := map[string]string{"OPENAI_BASE_URL": srv.URL()}
	m, err := llm.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("FromEnv() error = %v", err)
	}
	got, err := m.Generate(context.Background(), []llm.Message{user("hi")}, nil)
	if err != nil || got.Content != "hi from the fake" {
		t.Fatalf("Generate() = %+v, %v; want the fake's reply", got, err)
	}
}
