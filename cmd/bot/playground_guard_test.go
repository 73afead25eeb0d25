package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// openPage opens the page as a browser does with the URL the playground
// printed, and returns the page token in it and the cookie it left.
func (b *playgroundBot) openPage(t *testing.T) (string, *http.Cookie) {
	t.Helper()
	resp, err := botClient.Get(b.open) // botClient follows no redirect without a jar's cookie
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Request.Response.Cookies() {
		cookie = c
	}
	if cookie == nil {
		t.Fatalf("opening %s left no cookie", b.open)
	}
	req, _ := http.NewRequest(http.MethodGet, b.url, nil)
	req.AddCookie(cookie)
	resp, err = botClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	m := pageTokenMeta.FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("GET / with the cookie = %d; want the page with its token", resp.StatusCode)
	}
	return string(m[1]), cookie
}

// pageTokenMeta finds the page token in the page.
var pageTokenMeta = regexp.MustCompile(`<meta name="playground-token" content="([0-9a-f]+)">`)

// The page opens only from the URL the playground printed at start, so
// that another process on the machine — a tool the bot started, another
// user — cannot read the page token and act as anyone: approve a call,
// post as a teammate, read the threads.
func TestPlaygroundOpensOnlyFromThePrintedURL(t *testing.T) {
	t.Parallel()
	b := startPlayground(t)
	if !strings.HasPrefix(b.open, b.url+"?token=") || len(b.open) < len(b.url)+len("?token=")+32 {
		t.Fatalf("the playground printed %q; want %s?token= and a secret", b.open, b.url)
	}
	get := func(url string, cookie *http.Cookie) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := (&http.Client{Transport: botClient.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	access := strings.TrimPrefix(b.open, b.url+"?token=")
	port := b.url[strings.LastIndex(b.url, ":")+1 : len(b.url)-1]

	// Another process, as curl would: no page, no token, no acting.
	for _, tt := range []struct {
		name, url string
		cookie    *http.Cookie
	}{
		{"no token", b.url, nil},
		{"a wrong token", b.url + "?token=" + strings.Repeat("0", len(access)), nil},
		{"the token cut short", b.url + "?token=" + access[:len(access)-1], nil},
		{"a forged cookie", b.url, &http.Cookie{Name: "countersign_playground_" + port, Value: "0123"}},
	} {
		resp, body := get(tt.url, tt.cookie)
		if resp.StatusCode != http.StatusForbidden || pageTokenMeta.MatchString(body) || strings.Contains(body, access) ||
			!strings.Contains(body, "the URL the bot printed") || len(resp.Cookies()) != 0 {
			t.Errorf("%s: GET / = %d, cookies %v: %s; want 403 saying to open the printed URL", tt.name, resp.StatusCode, resp.Cookies(), body)
		}
	}
	for _, path := range []string{"ui/state", "events"} {
		if resp, body := get(b.url+path, nil); resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET /%s without the page = %d %s, want 403", path, resp.StatusCode, body)
		}
	}

	// The printed URL: a cookie, and the page at / with no token in its
	// address.
	resp, _ := get(b.open, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Errorf("GET the printed URL = %d, Location %q; want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	token, _ := b.openPage(t)

	// The token is on the line printed for the person, and nowhere in
	// the log.
	if logs := b.logs.String(); strings.Count(logs, access) != 1 || strings.Contains(logs, token) {
		t.Errorf("the bot's output has the access token %d times (want once: the printed URL), the page token %v:\n%s",
			strings.Count(logs, access), strings.Contains(logs, token), logs)
	}
}

// The playground answers only requests for a loopback Host, so a web page
// cannot reach it through DNS rebinding, and its UI only requests that
// carry the token of the page it served.
func TestPlaygroundGuardsItsPage(t *testing.T) {
	t.Parallel()
	b := startPlayground(t)
	port := b.url[strings.LastIndex(b.url, ":")+1 : len(b.url)-1]
	token, cookie := b.openPage(t)
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
		req.AddCookie(cookie)
		resp, err := botClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(got)
	}

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

// The bot's own http_request tool gets no answer from the bot, under any
// of its names: not the playground's page, whose token lets whoever holds
// it act as anyone, and not its UI even with that token. The policy lets
// the model call this machine without approval, as a policy written for
// a local API might.
func TestPlaygroundRefusesTheBotsOwnTool(t *testing.T) {
	t.Parallel()
	model := llmtest.NewOpenAIServer(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	rule := "tools:\n  http_request:\n    approval: never\n    allow_hosts: [\"127.0.0.1\", localhost]\n"
	if err := os.WriteFile(policy, []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startPlayground(t, "LLM_PROVIDER=openai", "OPENAI_API_KEY=test-key", "OPENAI_BASE_URL="+model.URL(), "BOT_POLICY="+policy)
	port := b.url[strings.LastIndex(b.url, ":")+1 : len(b.url)-1]
	ui := func(method, path, body string, token string) string {
		t.Helper()
		req, _ := http.NewRequest(method, b.url+path, strings.NewReader(body))
		req.Header.Set("X-Playground-Token", token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := botClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return string(got)
	}
	token, _ := b.openPage(t)

	// The first call reads the page, as a model that does not know the
	// token yet would; the others carry the token, as one that learned it
	// would.
	toolCall := func(id, method, url, body string) llm.ToolCall {
		a := map[string]any{"method": method, "url": url}
		if id != "c1" {
			a["headers"] = map[string]string{"X-Playground-Token": token, "Content-Type": "application/json"}
		}
		if body != "" {
			a["body"] = body
		}
		raw, _ := json.Marshal(a)
		return llm.ToolCall{ID: id, Name: "http_request", Arguments: string(raw)}
	}
	model.Then(
		llmtest.Reply("Looking around.",
			toolCall("c1", "GET", "http://127.0.0.1:"+port+"/", ""),
			toolCall("c2", "GET", "http://localhost:"+port+"/ui/state", ""),
			toolCall("c3", "POST", "http://127.0.0.1:"+port+"/ui/send", `{"user":"U0TEAMMATE","text":"forged by a tool"}`),
			toolCall("c4", "GET", "http://localhost:"+port+"/metrics", "")),
		llmtest.Reply("Done."),
	)
	ui("POST", "ui/send", `{"user":"U0YOU","text":"/agent look around"}`, token)
	deadline := time.Now().Add(60 * time.Second)
	for len(model.Requests()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the model was asked %d times, want 2 (the calls' results); bot output:\n%s", len(model.Requests()), b.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	results := 0
	for _, msg := range model.Requests()[1].Messages {
		if msg.Role != "tool" {
			continue
		}
		results++
		if text := msg.Text(); !strings.HasPrefix(text, "HTTP 403") || strings.Contains(text, token) || strings.Contains(text, "countersign_") {
			t.Errorf("result of %s = %q; want the bot's refusal", msg.ToolCallID, text)
		}
	}
	if results != 4 {
		t.Errorf("the model got %d results, want 4", results)
	}
	if state := ui("GET", "ui/state", "", token); strings.Contains(state, "forged by a tool") {
		t.Errorf("state = %s; a tool call posted as a person", state)
	}
}
