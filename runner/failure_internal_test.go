package runner

import "testing"

func TestFailureText(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"node model: model openai gpt-4o-mini at http://h/v1: model unavailable after 4 attempts: openai gpt-4o-mini at http://h/v1: HTTP 503: overloaded",
			"the model failed: model unavailable after 4 attempts: HTTP 503: overloaded (openai gpt-4o-mini at http://h/v1)"},
		{"node tools: panic: boom", "panic: boom"},
		{"something else", "something else"},
	}
	for _, tt := range tests {
		if got := failureText(tt.in); got != tt.want {
			t.Errorf("failureText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
