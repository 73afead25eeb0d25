package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/imagetest"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

var objectSchema = json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)

func ptr[T any](v T) *T { return &v }

// inProcess is a go-sdk server over streamable HTTP, with tools that show
// what the servers on npm cannot: annotations, the idempotency key, slow
// calls and elicitation.
type inProcess struct {
	srv  *sdk.Server
	url  string
	mu   sync.Mutex
	keys []string // the idempotency keys received
	auth []string // the Authorization headers received
}

func newInProcess(t *testing.T) *inProcess {
	t.Helper()
	p := &inProcess{srv: sdk.NewServer(&sdk.Implementation{Name: "inproc", Version: "1"}, nil)}
	text := func(s string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
	}
	p.srv.AddTool(&sdk.Tool{Name: "read", Description: "Reads a record.", InputSchema: objectSchema,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if k, ok := req.Params.Meta[mcp.IdempotencyKeyMeta].(string); ok {
				p.keys = append(p.keys, k)
			}
			return text("read: " + string(req.Params.Arguments)), nil
		})
	p.srv.AddTool(&sdk.Tool{Name: "write", Description: "Writes a record.", InputSchema: objectSchema,
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(true)}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return text("written"), nil })
	p.srv.AddTool(&sdk.Tool{Name: "launch", Description: "Launches.", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return text("launched"), nil })
	p.srv.AddTool(&sdk.Tool{Name: "slow", Description: "Never answers.", InputSchema: objectSchema},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	p.srv.AddTool(&sdk.Tool{Name: "fail", Description: "Fails.", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "no such record"}}}, nil
		})
	p.srv.AddTool(&sdk.Tool{Name: "mixed", Description: "Returns several kinds of content.", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{
				Content: []sdk.Content{
					&sdk.TextContent{Text: "here it is"},
					&sdk.ImageContent{MIMEType: "image/png", Data: make([]byte, 2048)},
				},
				StructuredContent: map[string]any{"id": 7},
			}, nil
		})
	p.srv.AddTool(&sdk.Tool{Name: "pictures", Description: "Returns images, good and bad.", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			png := imagetest.PNG(4, 0)
			padded := func(n int) []byte { return append(slices.Clip(png), make([]byte, n-len(png))...) }
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.TextContent{Text: "the page"},
				&sdk.ImageContent{MIMEType: "image/png", Data: png},
				&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///chart.png", MIMEType: "image/png", Blob: png}},
				&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///page.png", MIMEType: "image/png", Blob: []byte("<html>login</html>")}},
				&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "x]\n[image image/png, 1 KB]", MIMEType: "image/png", Blob: png}},
				&sdk.ImageContent{MIMEType: "image/jpeg", Data: png},                            // says JPEG, is PNG
				&sdk.ImageContent{MIMEType: "image/svg+xml", Data: []byte("<svg></svg>")},       // not a type shown
				&sdk.ImageContent{MIMEType: "image/png", Data: padded(tools.MaxImageBytes + 1)}, // over the cap
				&sdk.ImageContent{MIMEType: "image/png", Data: padded(tools.MaxImageBytes)},
				&sdk.ImageContent{MIMEType: "image/png", Data: padded(tools.MaxImageBytes)},
				&sdk.ImageContent{MIMEType: "image/png", Data: padded(tools.MaxImageBytes)},
				&sdk.ImageContent{MIMEType: "image/png", Data: padded(tools.MaxImageBytes)}, // past the result's cap
			}}, nil
		})
	p.srv.AddTool(&sdk.Tool{Name: "huge", Description: "Returns 2.5 MB of every kind of content.", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			big := strings.Repeat("é", 5<<16) // 640 KB, two bytes a character: 2.5 MB in all
			return &sdk.CallToolResult{
				Content: []sdk.Content{
					&sdk.TextContent{Text: big},
					&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///big", Text: big}},
					&sdk.ResourceLink{URI: "file:///" + big, Name: big},
				},
				StructuredContent: map[string]any{"blob": big},
			}, nil
		})
	p.srv.AddTool(&sdk.Tool{Name: "ask", Description: "Asks the user for a colour.", InputSchema: objectSchema},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			// Bounded: a session closing while the question is open waits
			// for this handler.
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			res, err := req.Session.Elicit(ctx, &sdk.ElicitParams{
				Message: "Which colour?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
					"colour": map[string]any{"type": "string", "enum": []any{"red", "blue"}},
				}, "required": []any{"colour"}},
			})
			if err != nil {
				return nil, err
			}
			return text(fmt.Sprintf("%s %v", res.Action, res.Content["colour"])), nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return p.srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.auth = append(p.auth, r.Header.Get("Authorization"))
		p.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	p.url = ts.URL
	return p
}

func newManager(t *testing.T, policy string, opts mcp.Options) *mcp.Manager {
	t.Helper()
	p, err := tools.ParsePolicyEnv([]byte(policy), func(k string) string { return map[string]string{"TOKEN": "s3cret"}[k] })
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	m, err := mcp.New(p, tools.Builtins(p, nil), opts)
	if err != nil {
		t.Fatalf("mcp.New: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func toolNames(ts []tools.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name())
	}
	return out
}

func TestAnnotationsTrustedAndNot(t *testing.T) {
	p := newInProcess(t)
	m := newManager(t, fmt.Sprintf(`mcp_servers:
  trusted:
    url: %[1]s
    trust_annotations: true
  untrusted:
    url: %[1]s
tools:
  trusted__launch: {approval: never}
  trusted__write: {approval: required, approvers: [U1]}
`, p.url), mcp.Options{})
	got := strings.Join(toolNames(m.Tools()), " ")
	for _, want := range []string{"trusted__read", "untrusted__read", "trusted__write"} {
		if !strings.Contains(got, want) {
			t.Errorf("Tools() = %s, want %s among them", got, want)
		}
	}
	tests := []struct {
		tool          string
		needsApproval bool
		idempotent    bool
		hints         string
	}{
		{"trusted__read", false, true, "read-only"},              // readOnlyHint trusted: no approval, re-run after a crash
		{"untrusted__read", true, false, "read-only"},            // the same hint, untrusted: only shown
		{"trusted__write", true, true, "idempotent destructive"}, // an explicit rule wins; idempotentHint trusted
		{"untrusted__write", true, false, "idempotent destructive"},
		{"trusted__launch", false, false, ""}, // the tool's own rule
		{"untrusted__launch", true, false, ""},
	}
	for _, tt := range tests {
		tool, rule, ok := m.Lookup(tt.tool)
		if !ok {
			t.Errorf("Lookup(%q) found nothing", tt.tool)
			continue
		}
		if rule.NeedsApproval() != tt.needsApproval {
			t.Errorf("Lookup(%q) rule needs approval = %v, want %v", tt.tool, rule.NeedsApproval(), tt.needsApproval)
		}
		if got := tool.Idempotent(json.RawMessage(`{}`)); got != tt.idempotent {
			t.Errorf("%s.Idempotent = %v, want %v", tt.tool, got, tt.idempotent)
		}
		o := tool.(tools.OriginTool).Origin()
		if got := strings.Join(o.Hints, " "); got != tt.hints {
			t.Errorf("%s hints = %q, want %q", tt.tool, got, tt.hints)
		}
	}
	if _, rule, _ := m.Lookup("trusted__write"); len(rule.Approvers) != 1 {
		t.Errorf("trusted__write approvers = %v, want the tool's own [U1]", rule.Approvers)
	}
}

func TestCallCarriesIdempotencyKeyAndHeaders(t *testing.T) {
	p := newInProcess(t)
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  s:\n    url: %s\n    headers: {Authorization: \"Bearer ${TOKEN}\"}\n", p.url), mcp.Options{})
	m.Tools()
	tool, _, ok := m.Lookup("s__read")
	if !ok {
		t.Fatal("s__read is not offered")
	}
	it := tool.(tools.InfoTool)
	info := tools.CallInfo{Thread: "T1:C1:1.0", Call: "0.0", Attempt: 1}
	for range 2 {
		if _, err := it.CallWithInfo(context.Background(), info, json.RawMessage(`{"text":"x"}`)); err != nil {
			t.Fatalf("call: %v", err)
		}
	}
	info.Attempt = 2
	res, err := it.CallWithInfo(context.Background(), info, json.RawMessage(`{"text":"x"}`))
	if err != nil || res != `read: {"text":"x"}` {
		t.Fatalf("call = %q, %v; want the server's text", res, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.keys) != 3 || p.keys[0] != p.keys[1] || p.keys[1] == p.keys[2] || p.keys[0] == "" {
		t.Errorf("idempotency keys = %q, want the same key for one attempt and another for the next", p.keys)
	}
	if p.keys[0] != mcp.IdempotencyKey(tools.CallInfo{Thread: "T1:C1:1.0", Call: "0.0", Attempt: 1}) {
		t.Errorf("key %q is not IdempotencyKey of the call", p.keys[0])
	}
	for _, a := range p.auth {
		if a != "Bearer s3cret" {
			t.Fatalf("Authorization = %q, want the header with ${TOKEN} expanded", a)
		}
	}
}

func TestCallResults(t *testing.T) {
	p := newInProcess(t)
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  s:\n    url: %s\n    timeout: 200ms\n", p.url), mcp.Options{})
	m.Tools()
	tests := []struct {
		tool    string
		want    string
		wantErr string
	}{
		{"s__mixed", "here it is\n[image image/png, 2.0 KiB: the data is not a PNG image]\n{\"id\":7}", ""},
		{"s__fail", "", "no such record"},
		{"s__slow", "", `MCP server "s" did not answer within 200ms`},
	}
	for _, tt := range tests {
		tool, _, _ := m.Lookup(tt.tool)
		got, err := tool.Call(context.Background(), json.RawMessage(`{"text":"x"}`))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s = %q, %v; want an error containing %q", tt.tool, got, err, tt.wantErr)
			}
			if errors.Is(err, tools.ErrOutcomeUnknown) {
				t.Errorf("%s error %v is an unknown outcome, want a plain error result", tt.tool, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s = %q, %v; want %q", tt.tool, got, err, tt.want)
		}
	}
	// The server still answers after a call that timed out.
	tool, _, _ := m.Lookup("s__launch")
	if got, err := tool.Call(context.Background(), json.RawMessage(`{"text":"x"}`)); err != nil || got != "launched" {
		t.Errorf("s__launch after a timeout = %q, %v", got, err)
	}
}

// A result of 2.5 MB (about 150 times the default cut) reaches the
// model, and so the checkpoint, cut as an http_request body is, its size
// said.
func TestCallResultsAreBounded(t *testing.T) {
	p := newInProcess(t)
	for _, limit := range []int{0, 1000} {
		m := newManager(t, fmt.Sprintf("mcp_servers:\n  s:\n    url: %s\n", p.url), mcp.Options{MaxResult: limit})
		m.Tools()
		tool, _, _ := m.Lookup("s__huge")
		got, err := tool.Call(context.Background(), json.RawMessage(`{"text":"x"}`))
		if err != nil {
			t.Fatalf("s__huge: %v", err)
		}
		want := limit
		if want == 0 {
			want = mcp.DefaultMaxResult
		}
		shown, note, ok := strings.Cut(got, "\n[… ")
		if !ok || len(shown) > want || len(shown) < want-1 || !utf8.ValidString(got) ||
			!regexp.MustCompile(`^\d+ more bytes not shown\]$`).MatchString(note) {
			t.Errorf("MaxResult %d: result of %d bytes ends %q; want %d bytes and a note of the rest", limit, len(got), got[max(0, len(got)-60):], want)
		}
	}
}

func TestValidateAgainstInputSchema(t *testing.T) {
	p := newInProcess(t)
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  s:\n    url: %s\n", p.url), mcp.Options{})
	m.Tools()
	if err := m.Validate("s__read", json.RawMessage(`{"text":"x"}`)); err != nil {
		t.Errorf("Validate(good) = %v", err)
	}
	err := m.Validate("s__read", json.RawMessage(`{"txt":"x"}`))
	var aerr *tools.ArgsError
	if !errors.As(err, &aerr) || !strings.Contains(err.Error(), "text: missing property") {
		t.Errorf("Validate(bad) = %v, want text: missing property", err)
	}
}

func TestServerDownIsNotAFailedStart(t *testing.T) {
	m := newManager(t, `mcp_servers:
  gone:
    command: [/nonexistent/server]
  nothere:
    url: http://127.0.0.1:1/mcp
tools:
  http_request: {}
`, mcp.Options{MinBackoff: time.Hour})
	if got := toolNames(m.Tools()); strings.Join(got, " ") != "http_request" {
		t.Errorf("Tools() = %v, want only http_request while the servers are down", got)
	}
	detail := m.Describe()
	for _, want := range []string{"mcp gone: down: ", "/nonexistent/server", "mcp nothere: down: "} {
		if !strings.Contains(detail, want) {
			t.Errorf("Describe() = %q, want %q in it", detail, want)
		}
	}
}

func TestToolListChanged(t *testing.T) {
	p := newInProcess(t)
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  s:\n    url: %s\n", p.url), mcp.Options{})
	if names := toolNames(m.Tools()); strings.Contains(strings.Join(names, " "), "s__new") {
		t.Fatalf("Tools() = %v before the tool exists", names)
	}
	p.srv.AddTool(&sdk.Tool{Name: "new", Description: "Added later.", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return nil, nil })
	waitFor(t, "s__new to be offered", func() bool {
		_, _, ok := m.Lookup("s__new")
		return ok
	})
}

// fakeElicitor answers every request with answer, and records them.
type fakeElicitor struct {
	mu     sync.Mutex
	got    []tools.Elicitation
	answer tools.ElicitAnswer
	block  bool
}

func (f *fakeElicitor) Elicit(ctx context.Context, e tools.Elicitation) (tools.ElicitAnswer, error) {
	f.mu.Lock()
	f.got = append(f.got, e)
	f.mu.Unlock()
	if f.block {
		<-ctx.Done()
		return tools.ElicitAnswer{}, ctx.Err()
	}
	return f.answer, nil
}

func TestElicitation(t *testing.T) {
	p := newInProcess(t)
	tests := []struct {
		name string
		el   *fakeElicitor
		want string
	}{
		{"answered", &fakeElicitor{answer: tools.ElicitAnswer{Action: tools.ElicitAccept, Content: map[string]any{"colour": "blue"}}}, "accept blue"},
		{"declined", &fakeElicitor{answer: tools.ElicitAnswer{Action: tools.ElicitDecline}}, "decline <nil>"},
		{"no answer in time", &fakeElicitor{block: true}, "cancel <nil>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t, fmt.Sprintf("mcp_servers:\n  s:\n    url: %s\n    timeout: 2s\n", p.url), mcp.Options{Elicitor: tt.el})
			m.Tools()
			tool, _, _ := m.Lookup("s__ask")
			info := tools.CallInfo{Thread: "T1:C1:1.0", Call: "0.0", Attempt: 1, Requester: "U1", Channel: "C1"}
			got, err := tool.(tools.InfoTool).CallWithInfo(context.Background(), info, json.RawMessage(`{"text":"x"}`))
			if tt.el.block {
				// The server's wait is cut by the call's timeout too: what
				// matters is that the call ends and nobody is asked twice.
				if err == nil && got != tt.want {
					t.Errorf("call = %q, want %q or an error", got, tt.want)
				}
			} else if err != nil || got != tt.want {
				t.Errorf("call = %q, %v; want %q", got, err, tt.want)
			}
			tt.el.mu.Lock()
			defer tt.el.mu.Unlock()
			if len(tt.el.got) != 1 || tt.el.got[0].Call != info || tt.el.got[0].Message != "Which colour?" || tt.el.got[0].Tool != "s__ask" {
				t.Fatalf("elicitations = %+v, want one for the call", tt.el.got)
			}
			if !strings.Contains(string(tt.el.got[0].Schema), `"enum":["red","blue"]`) {
				t.Errorf("schema = %s, want the requested one", tt.el.got[0].Schema)
			}
		})
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestToolTimeout(t *testing.T) {
	m := newManager(t, "mcp_servers:\n  a:\n    url: http://127.0.0.1:1/mcp\n    timeout: 10m\n  b:\n    url: http://127.0.0.1:1/mcp\n", mcp.Options{})
	// Progress may keep a call of a going for up to an hour.
	if got := m.ToolTimeout(2 * time.Minute); got != time.Hour+5*time.Second {
		t.Errorf("ToolTimeout = %v, want the longest a server's call may last and a margin", got)
	}
}

func TestHTTPServerReconnects(t *testing.T) {
	p := newInProcess(t)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return p.srv }, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	m := newManager(t, "mcp_servers:\n  s:\n    url: http://"+addr+"/mcp\n", mcp.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, HTTPRetries: -1})
	if _, err := call(t, m, "s__launch", `{"text":"x"}`); err != nil {
		t.Fatalf("call before the restart: %v", err)
	}
	// The server goes away, taking its sessions with it, and comes back.
	_ = srv.Close()
	// Meanwhile a call is refused before anyone is asked to approve it.
	waitFor(t, "the server to be seen down", func() bool {
		err := m.Validate("s__launch", json.RawMessage(`{"text":"x"}`))
		return err != nil && strings.Contains(err.Error(), `MCP server "s" is unavailable`)
	})
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	srv = &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return p.srv }, nil)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	waitFor(t, "calls to work again", func() bool {
		if m.Validate("s__launch", json.RawMessage(`{"text":"x"}`)) != nil {
			return false
		}
		got, err := call(t, m, "s__launch", `{"text":"x"}`)
		return err == nil && got == "launched"
	})
}

func TestFixedToolsStartNothing(t *testing.T) {
	m := newManager(t, "mcp_servers:\n  s:\n    url: http://127.0.0.1:1/mcp\ntools:\n  http_request: {}\n", mcp.Options{})
	if got := toolNames(m.FixedTools()); strings.Join(got, " ") != "http_request" {
		t.Errorf("FixedTools() = %v, want the built-ins", got)
	}
	if st := m.Status(); st[0].State != mcp.NotStarted {
		t.Errorf("after FixedTools the server is %s, want not started", st[0].State)
	}
}

// A server's URL may hold secrets: its user information, its query, parts
// from ${VAR}. Errors quote the URL; what is shown of them does not.
func TestURLSecretsAreRedacted(t *testing.T) {
	p := newInProcess(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return p.srv }, nil)}
	go func() { _ = srv.Serve(ln) }()
	m := newManager(t, `mcp_servers:
  up:
    url: "http://bot:hunter22@`+ln.Addr().String()+`/mcp?api_key=${TOKEN}"
  down:
    url: "http://bot:hunter22@127.0.0.1:1/mcp?api_key=${TOKEN}"
`, mcp.Options{MinBackoff: time.Hour, HTTPRetries: -1})
	if _, err := call(t, m, "up__launch", `{"text":"x"}`); err != nil {
		t.Fatalf("call: %v", err)
	}
	_ = srv.Close()
	var callErr error
	waitFor(t, "the server to be seen down", func() bool {
		callErr = m.Validate("up__launch", json.RawMessage(`{"text":"x"}`))
		return callErr != nil
	})
	detail := m.Describe()
	for _, shown := range []string{detail, callErr.Error()} {
		if strings.Contains(shown, "s3cret") || strings.Contains(shown, "hunter22") {
			t.Errorf("shown: %q; want no password and no api_key", shown)
		}
	}
	if !strings.Contains(detail, "mcp down: down: ") || !strings.Contains(detail, "api_key="+tools.Masked) {
		t.Errorf("Describe() = %q, want the down server's error with its URL redacted", detail)
	}
}

// namedServer is a go-sdk server over streamable HTTP whose tools have
// the given names, each answering with its server's and its own name.
func namedServer(t *testing.T, who string, names ...string) (*sdk.Server, string) {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: who, Version: "1"}, nil)
	for _, name := range names {
		srv.AddTool(&sdk.Tool{Name: name, InputSchema: objectSchema},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: who + " ran " + name}}}, nil
			})
	}
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	return srv, ts.URL
}

// Two servers whose tools come out under the same name (server "a"'s
// "_x" and server "a_"'s "x" are both a___x) offer neither under it: a
// call approved as one must never run as the other, whichever server
// answered first. Their other tools are offered, /readyz says why the
// two are not, and the name is offered again once only one has it.
func TestToolNamesThatClashAcrossServers(t *testing.T) {
	a, aURL := namedServer(t, "a", "_x", "y")
	_, bURL := namedServer(t, "a_", "x", "z")
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  a:\n    url: %s\n  a_:\n    url: %s\n", aURL, bURL), mcp.Options{})
	m.Wait(context.Background())
	waitFor(t, "both servers up", func() bool {
		up := 0
		for _, st := range m.Status() {
			if st.State == mcp.Up {
				up++
			}
		}
		return up == 2
	})
	if got := strings.Join(toolNames(m.Tools()), " "); !strings.Contains(got, "a__y") || !strings.Contains(got, "a___z") || strings.Contains(got, "a___x") {
		t.Errorf("Tools() = %s, want a__y and a___z and no a___x", got)
	}
	if _, _, ok := m.Lookup("a___x"); ok {
		t.Error("Lookup(a___x) found a tool, want none: two servers have it")
	}
	d := m.Describe()
	for _, want := range []string{`left out "_x": its name a___x is also that of "x" of server a_`, `left out "x": its name a___x is also that of "_x" of server a`} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe() = %q, want %q in it", d, want)
		}
	}
	a.RemoveTools("_x")
	waitFor(t, "a___x offered, as a_'s x", func() bool {
		_, _, ok := m.Lookup("a___x")
		return ok
	})
	if got, err := call(t, m, "a___x", `{"text":"t"}`); err != nil || got != "a_ ran x" {
		t.Errorf("a___x = %q, %v; want a_'s x to run", got, err)
	}
}

// A tool's version is the same wherever its definition is listed (two
// processes, or one after a restart) and changes with its description.
func TestToolVersion(t *testing.T) {
	p := newInProcess(t)
	version := func() string {
		m := newManager(t, fmt.Sprintf("mcp_servers:\n  s:\n    url: %s\n", p.url), mcp.Options{})
		tool, _, ok := m.Lookup("s__launch")
		if !ok {
			t.Fatalf("s__launch not offered")
		}
		return tool.(tools.VersionedTool).Version()
	}
	first, again := version(), version()
	if first == "" || first != again {
		t.Errorf("versions of one definition = %q, %q; want one, not empty", first, again)
	}
	p.srv.AddTool(&sdk.Tool{Name: "launch", Description: "Launches the missiles.", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return nil, nil })
	if changed := version(); changed == first {
		t.Errorf("version after the description changed = %q, want another", changed)
	}
}

// A result's images reach the model as images when they are of a type
// every provider takes, are what they say they are, and fit the caps;
// every other image is a line of text saying why the model is not shown
// it. People see the lines only (CallWithInfo).
func TestImagesOfAResult(t *testing.T) {
	p := newInProcess(t)
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  s:\n    url: %s\n", p.url), mcp.Options{})
	m.Tools()
	tool, _, ok := m.Lookup("s__pictures")
	if !ok {
		t.Fatal("s__pictures is not offered")
	}
	it, ok := tool.(tools.ImageTool)
	if !ok {
		t.Fatal("an MCP tool is not a tools.ImageTool")
	}
	text, images, err := it.CallWithImages(context.Background(), tools.CallInfo{}, json.RawMessage(`{}`))
	if err != nil {
		t.Fatalf("CallWithImages: %v", err)
	}
	png := imagetest.PNG(4, 0)
	wantLines := []string{
		"the page",
		fmt.Sprintf("[image image/png, %d bytes]", len(png)),
		fmt.Sprintf("[resource file:///chart.png, image/png, %d bytes]", len(png)),
		"[resource file:///page.png, image/png, 18 bytes: the data is not a PNG image]",
		fmt.Sprintf(`[resource "x]\n[image image/png, 1 KB]", image/png, %d bytes]`, len(png)),
		fmt.Sprintf("[image image/jpeg, %d bytes: the data is not a JPEG image]", len(png)),
		"[image image/svg+xml, 11 bytes: the model is shown PNG, JPEG, GIF and WebP images only]",
		"[image image/png, 1.0 MiB: over the 1 MiB the model is shown]",
		"[image image/png, 1 MiB]",
		"[image image/png, 1 MiB]",
		"[image image/png, 1 MiB]",
		"[image image/png, 1 MiB: over the 4 MiB of images one result shows the model]",
	}
	if got := strings.Split(text, "\n"); !slices.Equal(got, wantLines) {
		t.Errorf("text =\n%s\nwant\n%s", text, strings.Join(wantLines, "\n"))
	}
	if len(images) != 6 {
		t.Fatalf("%d images for the model, want 6 (the small one, two as resources, and three of 1 MiB)", len(images))
	}
	for _, img := range images[:3] {
		if img.MIME != "image/png" || !bytes.Equal(img.Data, png) {
			t.Errorf("image = %s, %d bytes; want the small PNG as the server sent it", img.MIME, len(img.Data))
		}
	}
	for _, img := range images[3:] {
		if img.MIME != "image/png" || len(img.Data) != tools.MaxImageBytes {
			t.Errorf("image = %s, %d bytes; want a PNG of 1 MiB", img.MIME, len(img.Data))
		}
	}
	// Whoever is shown the call's text gets the same lines, no images.
	plain, err := it.CallWithInfo(context.Background(), tools.CallInfo{}, json.RawMessage(`{}`))
	if err != nil || plain != text {
		t.Errorf("CallWithInfo = %q, %v; want the text of CallWithImages", plain, err)
	}
}
