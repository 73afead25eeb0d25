package mcp

import (
	"errors"
	"net/http"
	"testing"
)

// roundTripped records whether a request went on.
type roundTripped struct{ n int }

func (r *roundTripped) RoundTrip(*http.Request) (*http.Response, error) {
	r.n++
	return &http.Response{StatusCode: http.StatusAccepted, Body: http.NoBody}, nil
}

// What an HTTP+SSE server names as the address of its messages goes on
// only to the configured URL's own scheme, host and port, however it is
// written.
func TestSameOrigin(t *testing.T) {
	tests := []struct {
		endpoint string
		ok       bool
	}{
		{"https://mcp.example.com/message?sessionId=1", true},
		{"https://MCP.example.com:443/message", true},
		{"HTTPS://mcp.example.com/other/path", true},
		{"https://mcp.example.com:8443/message", false},
		{"http://mcp.example.com/message", false},
		{"https://mcp.example.com.evil.test/message", false},
		{"https://mcp.example.com@evil.test/message", false},
		{"https://evil.test/mcp.example.com/message", false},
		{"https://evil.test/?https://mcp.example.com/", false},
	}
	for _, tt := range tests {
		next := &roundTripped{}
		o := &sameOrigin{origin: origin("https://user:pw@mcp.example.com/sse?key=1"), server: "s", next: next}
		req, err := http.NewRequest(http.MethodPost, tt.endpoint, http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		_, err = o.RoundTrip(req)
		if got := err == nil && next.n == 1; got != tt.ok {
			t.Errorf("POST %s: sent %v (%v), want %v", tt.endpoint, next.n == 1, err, tt.ok)
		}
		if !tt.ok && !errors.Is(err, ErrOtherOrigin) {
			t.Errorf("POST %s = %v, want ErrOtherOrigin", tt.endpoint, err)
		}
	}
}
