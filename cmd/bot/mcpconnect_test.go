package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/tools"
)

var authorizeURL = regexp.MustCompile(`https?://\S+/authorize\?\S+`)

// `bot mcp connect` against a server that lists its tools without a
// token (and asks for one only at a call) makes the connection a call
// would: it prints the authorization URL, the person's browser ends on
// the bot's callback, and the command says Connected only once the
// connection is kept, sealed, where `bot mcp connections` lists it.
func TestMCPConnectCommandConnectsToAServerThatListsWithoutAToken(t *testing.T) {
	t.Parallel()
	h, srv := oauthHarness(t, "")
	cmd := exec.Command(botBinary, "mcp", "connect", "tickets", "--user", "U1")
	cmd.Env = h.env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })

	var authURL string
	h.eventually(func() bool {
		authURL = authorizeURL.FindString(out.String())
		return authURL != ""
	}, "bot mcp connect prints the authorization URL")
	if status, page := h.browse(authURL, "U1"); status != http.StatusOK {
		t.Fatalf("callback: %d %s", status, page)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("bot mcp connect: %v\n%s", err, out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("bot mcp connect did not end once the browser was back:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "Connected to tickets as U1") {
		t.Fatalf("bot mcp connect printed:\n%s", out.String())
	}

	var conn struct{ Server, User string }
	listed := h.cli(t, "", "mcp", "connections", "--user", "U1", "--json")
	if err := json.Unmarshal([]byte(strings.TrimSpace(listed)), &conn); err != nil || conn.Server != "tickets" || conn.User != "U1" {
		t.Fatalf("bot mcp connections after connect: %q (%v)", listed, err)
	}
	issued := srv.Tokens()
	if len(issued) == 0 {
		t.Fatal("the authorization server issued no token")
	}
	stored := redisText(t, h)
	for _, tok := range issued {
		if strings.Contains(stored, tok) || strings.Contains(out.String(), tok) {
			t.Fatal("a token is in Redis in clear or in the command's output")
		}
	}
}

// `bot mcp connect` against a server that asks for no token at all says
// so and keeps nothing, rather than saying Connected.
func TestMCPConnectCommandSaysWhenTheServerAsksForNoToken(t *testing.T) {
	t.Parallel()
	h, _ := oauthHarness(t, "")
	plain := sdk.NewServer(&sdk.Implementation{Name: "plain", Version: "1"}, nil)
	sdk.AddTool(plain, &sdk.Tool{Name: "hello", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest, map[string]any) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "hi"}}}, nil, nil
		})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return plain }, nil))
	t.Cleanup(ts.Close)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("mcp_servers:\n  plain:\n    url: "+ts.URL+"\n    auth: service\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(append([]string(nil), h.env...), "BOT_POLICY="+policy)
	cmd := exec.Command(botBinary, "mcp", "connect", "plain")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "Connected") {
		t.Fatalf("bot mcp connect against a server that asks for no token: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "without asking for a token") || !strings.Contains(string(out), "no connection was made or kept") {
		t.Fatalf("bot mcp connect does not say why nothing was kept:\n%s", out)
	}
	t.Logf("bot mcp connect said:\n%s", out)
	cmd = exec.Command(botBinary, "mcp", "connections")
	cmd.Env = env
	if listed, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(listed)) != "no connections" {
		t.Fatalf("bot mcp connections: %v\n%s", err, listed)
	}
}

// The conformance client's person sends the bot's input form as it is
// shown: the answer is the schema's defaults, each of its type, read
// back by the bot's reading of a submitted form; a field without a
// default is left out.
func TestConformancePersonAnswersWithTheFormsDefaults(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{
		"name":{"type":"string","default":"John Doe"},
		"age":{"type":"integer","default":30},
		"score":{"type":"number","default":95.5},
		"status":{"type":"string","enum":["active","inactive","pending"],"default":"active"},
		"verified":{"type":"boolean","default":true},
		"when":{"type":"string","format":"date","default":"2026-01-02"},
		"note":{"type":"string"}}}`)
	ans, err := formPerson{}.Elicit(context.Background(), tools.Elicitation{Tool: "t", Message: "m", Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"name": "John Doe", "age": int64(30), "score": 95.5, "status": "active", "verified": true, "when": "2026-01-02"}
	if ans.Action != tools.ElicitAccept || !reflect.DeepEqual(ans.Content, want) {
		t.Fatalf("answer %s %#v, want accept %#v", ans.Action, ans.Content, want)
	}
}
