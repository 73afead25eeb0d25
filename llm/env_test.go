package llm_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// A base URL that is not an absolute http or https URL is refused at
// start, with what is wrong and a good value to copy, and never the value
// itself (it may be a key pasted into the wrong variable).
func TestBadBaseURLSaysWhatAGoodOneIs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"OPENAI_BASE_URL": "localhost:8080/v1"},
			[]string{"OPENAI_BASE_URL: it has no scheme: write http:// or https:// before the host", "e.g. http://localhost:11434/v1 (Ollama) or https://api.openai.com/v1"}},
		{map[string]string{"OPENAI_API_KEY": "sk-1", "OPENAI_BASE_URL": "http//localhost:8080/v1"}, []string{"OPENAI_BASE_URL: it has no scheme", "http://localhost:11434/v1"}},
		{map[string]string{"OPENAI_BASE_URL": "sk-proj-0123456789abcdef"}, []string{"OPENAI_BASE_URL: it has no scheme", "http://localhost:11434/v1"}},
		{map[string]string{"OPENAI_BASE_URL": "ftp://models.example/v1"}, []string{"OPENAI_BASE_URL: its scheme must be http or https", "http://localhost:11434/v1"}},
		{map[string]string{"OPENAI_BASE_URL": "https:///v1"}, []string{"OPENAI_BASE_URL: it has no host", "http://localhost:11434/v1"}},
		{map[string]string{"OPENAI_BASE_URL": "http://local host:8080/v1"}, []string{"OPENAI_BASE_URL: it is not a URL", "http://localhost:11434/v1"}},
		{map[string]string{"LLM_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-1", "ANTHROPIC_BASE_URL": "proxy.example:8080"},
			[]string{"ANTHROPIC_BASE_URL: it has no scheme", "e.g. https://api.anthropic.com/v1"}},
	}
	for _, tt := range tests {
		_, err := llm.FromEnv(func(k string) string { return tt.env[k] })
		if err == nil {
			t.Errorf("FromEnv(%v) = nil error; want the base URL refused", tt.env)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("FromEnv(%v) error = %q; want it to say %q", tt.env, err, w)
			}
		}
		for k, v := range tt.env {
			if strings.HasSuffix(k, "_BASE_URL") && strings.Contains(err.Error(), v) {
				t.Errorf("FromEnv(%v) error = %q; holds the value", tt.env, err)
			}
		}
	}
}

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
		{"the whole OpenAI endpoint", map[string]string{"OPENAI_BASE_URL": "http://localhost:8000/v1/chat/completions"}, "openai gpt-4o-mini at http://localhost:8000/v1", ""},
		{"the whole Anthropic endpoint", map[string]string{"LLM_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": "https://proxy.example/v1/messages/"}, "anthropic claude-sonnet-4-5 at https://proxy.example/v1", ""},
		{"Azure's v1 endpoint", map[string]string{"OPENAI_API_KEY": "sk-azure", "OPENAI_BASE_URL": "https://team.openai.azure.com/openai/v1/", "LLM_MODEL": "gpt-4o-prod"}, "openai gpt-4o-prod at https://team.openai.azure.com/openai/v1", ""},
		{"an Azure deployment URL", map[string]string{"OPENAI_API_KEY": "sk-azure",
			"OPENAI_BASE_URL": "https://team.openai.azure.com/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"}, "", "https://NAME.openai.azure.com/openai/v1"},
		{"an Azure deployment URL without its version", map[string]string{"OPENAI_API_KEY": "sk-azure",
			"OPENAI_BASE_URL": "https://team.openai.azure.com/openai/deployments/gpt-4o-prod"}, "", "LLM_MODEL set to the deployment's name"},
		{"a base URL with a query", map[string]string{"OPENAI_BASE_URL": "https://gateway.example/v1?key=sk-secret-in-url"}, "", "OPENAI_BASE_URL: base URL must have no query"},
		{"extended thinking", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "LLM_THINKING_BUDGET": "2048"}, "anthropic claude-sonnet-4-5", ""},
		{"thinking budget 0 is off", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "LLM_THINKING_BUDGET": "0", "LLM_TEMPERATURE": "0.2"}, "anthropic ", ""},
		{"thinking budget below Anthropic's least", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "LLM_THINKING_BUDGET": "512"}, "", "LLM_THINKING_BUDGET=\"512\": want a whole number of tokens from 1024"},
		{"thinking budget not a number", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "LLM_THINKING_BUDGET": "lots"}, "", "LLM_THINKING_BUDGET=\"lots\""},
		{"thinking budget too large", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "LLM_THINKING_BUDGET": "1000000"}, "", "LLM_THINKING_BUDGET"},
		{"thinking budget negative", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "LLM_THINKING_BUDGET": "-2048"}, "", "LLM_THINKING_BUDGET"},
		{"thinking with a temperature", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "LLM_THINKING_BUDGET": "2048", "LLM_TEMPERATURE": "0.2"}, "", "no temperature with extended thinking"},
		{"an Anthropic base URL with a query", map[string]string{"LLM_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": "https://proxy.example/v1?token=sk-secret"}, "", "ANTHROPIC_BASE_URL: base URL must have no query"},
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

// A base URL that is the whole chat completions endpoint reaches the
// server at that endpoint, not at …/chat/completions/chat/completions.
func TestWholeEndpointAsBaseURL(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("hi"))
	env := map[string]string{"OPENAI_BASE_URL": srv.URL() + "/chat/completions"}
	m, err := llm.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("FromEnv() error = %v", err)
	}
	if got, err := m.Generate(context.Background(), []llm.Message{user("hi")}, nil); err != nil || got.Content != "hi" {
		t.Fatalf("Generate() = %+v, %v; want the fake's reply", got, err)
	}
	if p := srv.Requests()[0].Path; p != "/v1/chat/completions" {
		t.Errorf("request path = %s, want /v1/chat/completions", p)
	}
}

// Azure OpenAI's v1 endpoint is given the key in its api-key header as
// well as OpenAI's bearer token; another server gets only the latter.
func TestAzureKeyHeader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		base, wantAPIKey string
	}{
		{"http://team.openai.azure.com/v1", "azure-key"}, // the fake answers at /v1
		{"http://team.services.ai.azure.com/v1", "azure-key"},
		{"http://gateway.example/v1", ""},
	} {
		srv := llmtest.NewOpenAIServer(t, llmtest.Reply("hi"))
		addr := strings.TrimPrefix(strings.TrimSuffix(srv.URL(), "/v1"), "http://")
		client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr) // every host is the fake
		}}}
		m, err := llm.NewOpenAI(llm.OpenAIOptions{APIKey: "azure-key", BaseURL: tt.base, Model: "gpt-4o-prod", HTTPClient: client})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Generate(context.Background(), []llm.Message{user("hi")}, nil); err != nil {
			t.Fatalf("%s: Generate() = %v", tt.base, err)
		}
		h := srv.Requests()[0].Header
		if got := h.Get("Api-Key"); got != tt.wantAPIKey {
			t.Errorf("%s: api-key header = %q, want %q", tt.base, got, tt.wantAPIKey)
		}
		if got := h.Get("Authorization"); got != "Bearer azure-key" {
			t.Errorf("%s: Authorization = %q, want the key as a bearer token", tt.base, got)
		}
	}
}

// A base URL that is not the API root (Ollama's without /v1) gets a bare
// 404 from the server's router: the error says what to check, where a
// server's own 404 (an unknown model) is left as it is.
func TestNotFoundAtTheBaseURL(t *testing.T) {
	t.Parallel()
	ollama := httptest.NewServer(http.NotFoundHandler()) // "404 page not found", as Ollama's router answers
	t.Cleanup(ollama.Close)
	env := map[string]string{"OPENAI_BASE_URL": ollama.URL, "LLM_MODEL": "llama3.1"}
	m, err := llm.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Generate(context.Background(), []llm.Message{user("hi")}, nil)
	var se *llm.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || !strings.Contains(err.Error(), "usually ends in /v1") {
		t.Errorf("Generate() = %v, want a 404 that says the base URL usually ends in /v1", err)
	}

	srv := llmtest.NewOpenAIServer(t)
	srv.ThenRaw(llmtest.Raw{Status: http.StatusNotFound, Body: `{"error":{"message":"The model 'gpt-9' does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`})
	env = map[string]string{"OPENAI_BASE_URL": srv.URL(), "LLM_MODEL": "gpt-9"}
	if m, err = llm.FromEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if _, err = m.Generate(context.Background(), []llm.Message{user("hi")}, nil); err == nil || strings.Contains(err.Error(), "/v1") && strings.Contains(err.Error(), "usually") {
		t.Errorf("Generate() = %v, want the server's own words only", err)
	}
}

// A key the provider refuses (HTTP 401) is said with the variable it
// came from, which is what the operator fixes; other refusals are not
// blamed on the key.
func TestRefusedKeyNamesItsVariable(t *testing.T) {
	t.Parallel()
	openai := llmtest.NewOpenAIServer(t)
	anthropic := llmtest.NewAnthropicServer(t)
	refused := func(status int, body string) llmtest.Raw { return llmtest.Raw{Status: status, Body: body} }
	openai.ThenRaw(refused(401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`),
		refused(403, `{"error":{"message":"Country, region, or territory not supported","type":"request_forbidden","code":"unsupported_country_region_territory"}}`))
	anthropic.ThenRaw(refused(401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`))
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OPENAI_API_KEY": "sk-wrong", "OPENAI_BASE_URL": openai.URL()}, "HTTP 401: Incorrect API key provided; check OPENAI_API_KEY"},
		{map[string]string{"OPENAI_API_KEY": "sk-wrong", "OPENAI_BASE_URL": openai.URL()}, "HTTP 403: Country, region, or territory not supported"},
		{map[string]string{"LLM_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": "sk-ant-wrong", "ANTHROPIC_BASE_URL": anthropic.URL()}, "HTTP 401: invalid x-api-key; check ANTHROPIC_API_KEY"},
	} {
		m, err := llm.FromEnv(func(k string) string { return c.env[k] })
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Generate(context.Background(), []llm.Message{user("hi")}, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Generate() error = %v, want %q", err, c.want)
		}
		if err != nil && strings.HasPrefix(c.want, "HTTP 403") && strings.Contains(err.Error(), "check ") {
			t.Errorf("Generate() error = %v: a refusal that is not the key's blames the key", err)
		}
		if err != nil && strings.Contains(err.Error(), "wrong") {
			t.Errorf("Generate() error = %v: holds the key", err)
		}
	}
}
