package mcp

import (
	"strconv"
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
	// What HTTP+SSE servers answer a POST of a session they do not know:
	// the TypeScript SDK's examples, the Python SDK, the Go SDK.
	{"Session not found", true},
	{"Could not find session", true},
	{"session not found\n", true},
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
	// HTTP+SSE servers' other answers.
	{"Missing sessionId parameter", false},
	{"session_id is required", false},
	{"Invalid message", false},
	{"SSE connection not established", false},
	{"session closed", false},
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

// sseAnswers are what HTTP+SSE servers answer a POST with, other than 2xx.
var sseAnswers = []struct {
	code int
	body string
	gone bool
}{
	// A session the server does not know: the POST was not taken.
	{400, "No transport found for sessionId", true},      // the TypeScript SDK's examples
	{404, "Session not found", true},                     // the TypeScript SDK's examples
	{404, "Could not find session", true},                // the Python SDK
	{404, "session not found\n", true},                   // the Go SDK
	{404, `{"error":"Session abc-123 not found"}`, true}, // a JSON error
	{500, "No transport found for sessionId", false},     // not a refusal of the session
	{403, "session not found", false},                    // nor this
	{400, "Missing sessionId parameter", false},          // the request was wrong
	{400, "Invalid message", false},                      // the TypeScript SDK's parse error
	{500, "SSE connection not established", false},
	{400, "session closed", false}, // the Go SDK: it knew the session, which ended
	{404, "", false},
	{502, "<html><body>Bad Gateway</body></html>", false},
}

func TestSSERefusal(t *testing.T) {
	for _, tt := range sseAnswers {
		gone, status := sseRefusal(tt.code, []byte(tt.body))
		if gone != tt.gone {
			t.Errorf("sseRefusal(%d, %q) gone = %v, want %v", tt.code, tt.body, gone, tt.gone)
		}
		if text := strings.TrimSpace(tt.body); text != "" && !strings.Contains(status, text) && !strings.HasPrefix(text, "{") {
			t.Errorf("sseRefusal(%d, %q) status = %q, want the server's words", tt.code, tt.body, status)
		}
		if !strings.HasPrefix(status, strconv.Itoa(tt.code)+" ") {
			t.Errorf("sseRefusal(%d, %q) status = %q, want it to begin with the code", tt.code, tt.body, status)
		}
	}
}

// FuzzSSERefusal reads any answer to a POST of an HTTP+SSE session: a
// POST is taken as refused for its session (and its call sent again) only
// on a 400 or 404 whose body says so, never otherwise; the status line
// the SDK quotes is one line of valid UTF-8, short, beginning with the
// code.
func FuzzSSERefusal(f *testing.F) {
	for _, tt := range sseAnswers {
		f.Add(tt.code, []byte(tt.body))
	}
	f.Add(404, []byte("\xff\xfe no transport found for sessionId\r\nX: y"))
	f.Add(400, []byte(`{"error":{"message":"Unknown session"}}`))
	f.Fuzz(func(t *testing.T, code int, body []byte) {
		gone, status := sseRefusal(code, body)
		if gone && (code != 400 && code != 404 || !sessionUnknown(body)) {
			t.Fatalf("sseRefusal(%d, %q): taken as a refused session", code, body)
		}
		if !utf8.ValidString(status) || strings.ContainsAny(status, "\n\r") || len(status) > 300 {
			t.Fatalf("sseRefusal(%d, %q) status = %q: want one short line of valid UTF-8", code, body, status)
		}
		if !strings.HasPrefix(status, strconv.Itoa(code)) {
			t.Fatalf("sseRefusal(%d, %q) status = %q: want the code first", code, body, status)
		}
	})
}
