package mcp

import (
	"strings"
	"testing"
	"unicode/utf8"
)

var sessionBodies = []struct {
	body string
	gone bool
}{
	// The TypeScript SDK's examples and server-everything.
	{`{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":7}`, true},
	{`{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}`, true},
	// Python SDK servers before they answered 404.
	{"Bad Request: No valid session ID provided", true},
	{`{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}`, true},
	{"No transport found for sessionId", true},
	{`{"error":"invalid_session","message":"Invalid or expired session"}`, true},
	{`{"detail":"Session 'a1b2-c3' not found"}`, true},
	{"session id abc123 is unknown", true},
	{"Session has expired", true},
	// Other reasons: the request itself was wrong; a new session would not help.
	{`{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Unsupported protocol version (supported versions: 2025-06-18)"},"id":null}`, false},
	{`{"jsonrpc":"2.0","error":{"code":-32600,"message":"Bad Request: Mcp-Session-Id header is required"},"id":null}`, false},
	{"Accept must contain both 'application/json' and 'text/event-stream'", false},
	{"session-less mode: token expired", false},
	{`{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params: session_name is required"},"id":3}`, false},
	{`{"message":"ok","error":{"message":"Parse error"}}`, false},
	// The newest protocol's "method not found" comes with a 404.
	{`{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"Method not found: tools/call"}}`, false},
	{"", false},
}

func TestSessionUnknown(t *testing.T) {
	for _, tt := range sessionBodies {
		if got := sessionUnknown([]byte(tt.body)); got != tt.gone {
			t.Errorf("sessionUnknown(%s) = %v, want %v", tt.body, got, tt.gone)
		}
	}
}

// FuzzSessionUnknown reads any 400 body: nothing panics, a body that
// says nothing of a session (or of an uninitialized server) is never
// taken for a forgotten session, and the text shown is short valid
// UTF-8 on one line.
func FuzzSessionUnknown(f *testing.F) {
	for _, tt := range sessionBodies {
		f.Add([]byte(tt.body))
	}
	f.Add([]byte(`{"error":{"message":1}}`))
	f.Add([]byte("\xff\xfe session not found"))
	f.Fuzz(func(t *testing.T, body []byte) {
		gone := sessionUnknown(body)
		low := strings.ToLower(string(body))
		if gone && !strings.Contains(low, "session") && !strings.Contains(low, "initialized") &&
			!strings.Contains(low, `\u`) { // JSON escapes may spell it
			t.Fatalf("sessionUnknown(%q) = true, yet it says nothing of a session", body)
		}
		text := errorText(body)
		if !utf8.ValidString(text) || strings.ContainsAny(text, "\n\r") || len(text) > 200+len("…") {
			t.Fatalf("errorText(%q) = %q: want one line of at most 200 bytes of valid UTF-8", body, text)
		}
	})
}
