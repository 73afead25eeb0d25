package llm

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"
)

func TestNewStatusError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header http.Header
		body   string
		want   StatusError
	}{
		{
			name: "openai error",
			body: `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			want: StatusError{StatusCode: 429, Message: "Rate limit reached", Type: "requests"},
		},
		{
			name: "anthropic error",
			body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			want: StatusError{StatusCode: 429, Message: "Overloaded", Type: "overloaded_error"},
		},
		{
			name: "out of quota",
			body: `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
			want: StatusError{StatusCode: 429, Message: "You exceeded your current quota.", Type: "insufficient_quota"},
		},
		{
			name: "html from a proxy",
			body: "<html>\n<body>Bad   gateway</body></html>",
			want: StatusError{StatusCode: 429, Message: "<html> <body>Bad gateway</body></html>"},
		},
		{
			name:   "retry-after seconds",
			header: http.Header{"Retry-After": {"2"}},
			want:   StatusError{StatusCode: 429, RetryAfter: 2 * time.Second},
		},
		{
			name:   "retry-after-ms wins",
			header: http.Header{"Retry-After": {"2"}, "Retry-After-Ms": {"1500"}},
			want:   StatusError{StatusCode: 429, RetryAfter: 1500 * time.Millisecond},
		},
		{
			name:   "retry-after date",
			header: http.Header{"Retry-After": {"Wed, 21 Oct 2015 07:28:00 GMT"}},
			want:   StatusError{StatusCode: 429, RetryAfter: 12 * time.Second},
		},
		{
			name:   "retry-after date passed",
			header: http.Header{"Retry-After": {"Wed, 21 Oct 2015 07:27:00 GMT"}},
			want:   StatusError{StatusCode: 429},
		},
		{
			name:   "retry-after of ages",
			header: http.Header{"Retry-After": {"1e300"}},
			want:   StatusError{StatusCode: 429, RetryAfter: 24 * time.Hour},
		},
		{
			name:   "retry-after neither",
			header: http.Header{"Retry-After": {"soon"}},
			want:   StatusError{StatusCode: 429},
		},
		{
			name: "text-generation-inference error",
			body: `{"error":"Input validation error: ` + "`inputs`" + ` must not be empty","error_type":"validation"}`,
			want: StatusError{StatusCode: 429, Message: "Input validation error: `inputs` must not be empty", Type: "validation"},
		},
		{
			name: "vLLM error at the top level",
			body: `{"object":"error","message":"The model ` + "`llama`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}`,
			want: StatusError{StatusCode: 429, Message: "The model `llama` does not exist.", Type: "NotFoundError"},
		},
		{
			name: "Mistral's validation error",
			body: `{"object":"error","message":{"detail":[{"type":"extra_forbidden","loc":["body","stream_options","include_usage"],"msg":"Extra inputs are not permitted","input":true}]},"type":"invalid_request_error","param":null,"code":null}`,
			want: StatusError{StatusCode: 429, Message: "body.stream_options.include_usage: Extra inputs are not permitted", Type: "invalid_request_error"},
		},
		{
			name: "an error field of no known shape",
			body: `{"error":42}`,
			want: StatusError{StatusCode: 429, Message: `{"error":42}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Date(2015, 10, 21, 7, 27, 48, 0, time.UTC)
			got := newStatusError(429, tt.header, []byte(tt.body), now)
			if *got != tt.want {
				t.Errorf("newStatusError(429, %v, %q) = %+v, want %+v", tt.header, tt.body, *got, tt.want)
			}
		})
	}
}

func TestMergeTurns(t *testing.T) {
	t.Parallel()
	in := `{"model":"m","max_tokens":10,"system":"s","messages":[
		{"role":"user","content":"plain"},
		{"role":"user","content":[{"type":"text","text":"b"}]},
		{"role":"assistant","content":[{"type":"text","text":"t"}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"1","name":"n","input":{"z":1,"a":2}}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"2","name":"n","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"1","content":"r1"}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"2","content":"r2"}]}
	]}`
	want := `{"model":"m","max_tokens":10,"system":"s","messages":[
		{"role":"user","content":[{"type":"text","text":"plain"},{"type":"text","text":"b"}]},
		{"role":"assistant","content":[{"type":"text","text":"t"},
			{"type":"tool_use","id":"1","name":"n","input":{"z":1,"a":2}},
			{"type":"tool_use","id":"2","name":"n","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"1","content":"r1"},
			{"type":"tool_result","tool_use_id":"2","content":"r2"}]}
	]}`
	got, err := mergeTurns([]byte(in), nil, nil, nil)
	if err != nil {
		t.Fatalf("mergeTurns() error = %v", err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("mergeTurns() = %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("mergeTurns() = %s\nwant %s", got, want)
	}

	if _, err := mergeTurns([]byte(`{"messages":[{"role":"user","content":42}]}`), nil, nil, nil); err == nil {
		t.Errorf("mergeTurns(numeric content) error = nil, want an error")
	}
}

func TestObjectArguments(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`{"a":1}`, `{"a":1}`},
		{` {"b": [1, 2]} `, ` {"b": [1, 2]} `},
		{``, `{}`},
		{`null`, `{"invalid_arguments":"null"}`},
		{`[1]`, `{"invalid_arguments":"[1]"}`},
		{`{"a":`, `{"invalid_arguments":"{\"a\":"}`},
	}
	for _, tt := range tests {
		if got := objectArguments(tt.in); got != tt.want {
			t.Errorf("objectArguments(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
