package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

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
