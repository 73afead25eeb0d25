package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// The playground answers only requests for a loopback Host, so a web page
// cannot reach it through DNS rebinding, and its UI only requests that
// carry the token of the page it served.
func TestPlaygroundGuardsItsPage(t *testing.T) {
	t.Parallel()
	b := startPlayground(t)
	port := b.url[strings.LastIndex(b.url, ":")+1 : len(b.url)-1]
	do := func(method, path, host, token, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, b.url+strings.TrimPrefix(path, "/"), strings.NewReader(body))
		if host != "" {
			req.Host = host
		}
		if token != "" {
			req.Header.Set("X-Playground-Token", token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := botClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(got)
	}

	status, page := do("GET", "/", "", "", "")
	m := regexp.MustCompile(`<meta name="playground-token" content="([0-9a-f]+)">`).FindStringSubmatch(page)
	if status != http.StatusOK || m == nil {
		t.Fatalf("GET / = %d; want the page with its token", status)
	}
	token := m[1]
	send := `{"user":"U0YOU","text":"hello"}`
	tests := []struct {
		name, method, path, host, token, body string
		want                                  int
	}{
		{"page for a rebound name", "GET", "/", "attacker.example:" + port, "", "", http.StatusForbidden},
		{"page for localhost", "GET", "/", "localhost:" + port, "", "", http.StatusOK},
		{"page for [::1]", "GET", "/", "[::1]:" + port, "", "", http.StatusOK},
		{"state without the token", "GET", "/ui/state", "", "", "", http.StatusForbidden},
		{"state with a wrong token", "GET", "/ui/state", "", "0123", "", http.StatusForbidden},
		{"state with the token", "GET", "/ui/state", "", token, "", http.StatusOK},
		{"state for a rebound name, with the token", "GET", "/ui/state", "attacker.example:" + port, token, "", http.StatusForbidden},
		{"events without the token", "GET", "/events", "", "", "", http.StatusForbidden},
		{"send without the token", "POST", "/ui/send", "", "", send, http.StatusForbidden},
		{"click for a rebound name", "POST", "/ui/click", "attacker.example", token, `{"user":"U0YOU","ts":"1","action_id":"approve"}`, http.StatusForbidden},
		{"send with the token", "POST", "/ui/send", "127.0.0.1:" + port, token, send, http.StatusOK},
	}
	for _, tt := range tests {
		if got, body := do(tt.method, tt.path, tt.host, tt.token, tt.body); got != tt.want {
			t.Errorf("%s: %s %s (Host %q) = %d %s, want %d", tt.name, tt.method, tt.path, tt.host, got, body, tt.want)
		}
	}
	if _, state := do("GET", "/ui/state", "", token, ""); strings.Count(state, `"text":"hello"`) != 1 {
		t.Errorf("state = %s; want exactly the one message sent with the token", state)
	}
}
