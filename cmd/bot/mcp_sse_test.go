package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/llm/llmtest"
)

// A server of the 2024-11-05 HTTP+SSE transport, configured with
// transport: sse: its tool is offered, its card shows it, and once
// approved it runs once with the server's header.
func TestMCPServerOverSSE(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	var auth atomic.Value
	srv := sdk.NewServer(&sdk.Implementation{Name: "legacy", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "restart", Description: "Restarts a service.", InputSchema: map[string]any{
		"type": "object", "properties": map[string]any{"service": map[string]any{"type": "string"}}, "required": []any{"service"}}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			runs.Add(1)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "restarted"}}}, nil
		})
	h := sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			auth.Store(r.Header.Get("Authorization"))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	hb := newHarness(t, "mcp_servers:\n  legacy:\n    url: "+hs.URL+"/sse\n    transport: sse\n    headers: {Authorization: \"Bearer legacy-token\"}\n    approvers: ["+approver+"]\n")
	hb.model.Then(
		llmtest.Reply("Restarting.", llmtest.Call("c1", "legacy__restart", `{"service":"web"}`)),
		llmtest.Reply("Restarted."),
	)
	hb.command("restart web", nil, nil)
	root := hb.root(1)
	card := hb.cards(root, 1)[0]
	if got := hb.card(card); !strings.Contains(got, "MCP server *legacy*") || !strings.Contains(got, "Restarts a service.") {
		t.Errorf("card = %s, want the server and the tool's description", got)
	}
	hb.click(card, "approve", approver)
	hb.reply(root, "Restarted.")
	if got := lastToolResult(t, hb); got != "restarted" {
		t.Errorf("the model was told %q, want the server's answer", got)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the server ran the tool %d times, want once", n)
	}
	if got, _ := auth.Load().(string); got != "Bearer legacy-token" {
		t.Errorf("the server's posts came with Authorization %q, want the configured header", got)
	}
}

// A server of the HTTP+SSE transport that forgot the session (it was
// restarted behind a load balancer, which kept the bot's stream on the
// instance that opened it and sends every new request to the restarted
// one) answers the approved call's POST 404 "session not found": it did
// not take the call. The bot begins a new session and sends the call
// there, once: it runs once, and the thread gets its answer.
func TestMCPSSEServerThatForgotTheSession(t *testing.T) {
	t.Parallel()
	type instance struct {
		runs atomic.Int32
		h    http.Handler
	}
	newInstance := func(name string) *instance {
		in := &instance{}
		srv := sdk.NewServer(&sdk.Implementation{Name: "legacy", Version: "1"}, nil)
		srv.AddTool(&sdk.Tool{Name: "restart", Description: "Restarts a service.", InputSchema: map[string]any{
			"type": "object", "properties": map[string]any{"service": map[string]any{"type": "string"}}, "required": []any{"service"}}},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				in.runs.Add(1)
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "restarted by " + name}}}, nil
			})
		in.h = sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return srv }, nil)
		return in
	}
	first, second := newInstance("first"), newInstance("second")
	var current atomic.Pointer[instance]
	current.Store(first)
	var calls, refused atomic.Int32 // tools/call POSTs, and those answered 404
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method != http.MethodPost || !bytes.Contains(body, []byte(`"tools/call"`)) {
			current.Load().h.ServeHTTP(w, r)
			return
		}
		calls.Add(1)
		rec := &statusWriter{ResponseWriter: w}
		current.Load().h.ServeHTTP(rec, r)
		if rec.status == http.StatusNotFound {
			refused.Add(1)
		}
	}))
	t.Cleanup(hs.Close)
	h := newHarness(t, "mcp_servers:\n  legacy:\n    url: "+hs.URL+"/sse\n    transport: sse\n    approvers: ["+approver+"]\n")
	h.model.Then(
		llmtest.Reply("Restarting.", llmtest.Call("c1", "legacy__restart", `{"service":"web"}`)),
		llmtest.Reply("Restarted web."),
		llmtest.Reply("Restarting again.", llmtest.Call("c2", "legacy__restart", `{"service":"db"}`)),
		llmtest.Reply("Restarted db."),
	)
	h.command("restart web", nil, nil)
	root := h.root(1)
	h.click(h.cardWith(root, "approve", 20*time.Second), "approve", approver)
	h.reply(root, "Restarted web.")

	current.Store(second) // the first keeps the bot's stream open

	h.command("restart db", nil, nil)
	root = h.root(2)
	h.click(h.cardWith(root, "approve", 20*time.Second), "approve", approver)
	h.reply(root, "Restarted db.")
	if got := lastToolResult(t, h); got != "restarted by second" {
		t.Errorf("the model was told %q after the server forgot the session; want the second instance's answer", got)
	}
	if a, b := first.runs.Load(), second.runs.Load(); a != 1 || b != 1 {
		t.Errorf("the first instance ran the tool %d times, the second %d; want once each", a, b)
	}
	// The first call once; the second refused (404) once, then sent once more.
	if n, r := calls.Load(), refused.Load(); n != 3 || r != 1 {
		t.Errorf("the server got %d calls, %d of them refused with 404; want 3 and 1: the first, the second refused, the second again", n, r)
	}
	if !strings.Contains(h.logs.String(), "MCP server forgot the session before it took the call; sending the call in a new session") {
		t.Errorf("no log line saying the call is sent in a new session")
	}
}

// server-everything in its HTTP+SSE mode, restarted behind the bot: the
// bot's stream ends with it, the bot connects again, and the next
// approved call runs once there, with the server's answer. (It never
// answers a POST of a session it does not know: the bot posts nothing
// into a session whose stream has ended.)
func TestMCPRealSSEServerRestarted(t *testing.T) {
	t.Parallel()
	srv := startEverything(t, "sse")
	target, _ := url.Parse("http://" + srv.addr())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	var calls atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method == http.MethodPost && bytes.Contains(body, []byte(`"tools/call"`)) {
			calls.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	h := newHarness(t, "mcp_servers:\n  everything:\n    url: "+proxy.URL+"/sse\n    transport: sse\n    approvers: ["+approver+"]\n")
	sumsAcrossARestart(t, h, func() {
		srv.stop()
		srv.start()
		h.eventually(func() bool { return strings.Count(h.logs.String(), `"msg":"MCP server connected"`) >= 2 }, "the bot to connect to the restarted server")
	})
	if n := calls.Load(); n != 2 {
		t.Errorf("the server got %d calls, want 2: one before the restart, one after", n)
	}
}
