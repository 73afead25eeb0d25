package llm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// A failure that sending the conversation again cannot fix is marked
// final, as the engine reads it (graph.IsFinal), so that its run is
// offered no retry; one that someone can fix (quota, key) or that may
// pass (overload) is not.
func TestFinalErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"context full", 400, `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`, true},
		{"prompt too long", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208576 tokens > 200000 maximum"}}`, true},
		{"request too large", 413, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`, true},
		{"tool schema refused (openai)", 400, `{"error":{"message":"Invalid schema for function 'deploy': In context=(), 'required' is required to be supplied","type":"invalid_request_error","code":"invalid_function_parameters"}}`, false},
		{"tool schema refused (anthropic)", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"tools.0.custom.input_schema: JSON schema is invalid"}}`, false},
		{"bad parameter", 400, `{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error","code":"invalid_value"}}`, false},
		{"credit too low", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}`, false},
		{"out of quota", 429, `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","code":"insufficient_quota"}}`, false},
		{"bad key", 401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`, false},
		{"overloaded", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, false},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", tt.name, stream), func(t *testing.T) {
				t.Parallel()
				p := openAIRecorded(t, llm.OpenAIOptions{})
				for range 3 {
					p.then(llmtest.Raw{Status: tt.status, Body: tt.body})
				}
				m := llm.Retry(p.model, llm.RetryOptions{Attempts: 3, Sleep: func(context.Context, time.Duration) error { return nil }})
				_, _, err := ask(context.Background(), m, stream)
				if err == nil {
					t.Fatal("no error, want the provider's refusal")
				}
				if got := graph.IsFinal(fmt.Errorf("model m: %w", err)); got != tt.want {
					t.Errorf("IsFinal(%v) = %v, want %v", err, got, tt.want)
				}
			})
		}
	}
	// Inside an answer that began with 200.
	for _, tt := range []struct {
		e    llm.StreamError
		want bool
	}{
		{llm.StreamError{Type: "context_length_exceeded", Message: "too long"}, true},
		{llm.StreamError{Type: "overloaded_error"}, false},
		{llm.StreamError{Type: "insufficient_quota"}, false},
		{llm.StreamError{Cut: true}, false},
	} {
		if got := graph.IsFinal(&tt.e); got != tt.want {
			t.Errorf("IsFinal(%v) = %v, want %v", &tt.e, got, tt.want)
		}
	}
}
