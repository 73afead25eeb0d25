package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// Servers are told the bot's version, not a placeholder: by the shared
// session, by a session of the person who asked (auth: requester) and by
// the session `bot mcp connect` opens.
func TestClientReportsTheBotsVersion(t *testing.T) {
	mcp.SetClientVersion("v9.8.7")
	var mu sync.Mutex
	var got []string // what each session said it is
	srv := sdk.NewServer(&sdk.Implementation{Name: "versions", Version: "1"}, &sdk.ServerOptions{
		InitializedHandler: func(_ context.Context, req *sdk.InitializedRequest) {
			if ip := req.Session.InitializeParams(); ip != nil && ip.ClientInfo != nil {
				mu.Lock()
				got = append(got, ip.ClientInfo.Name+" "+ip.ClientInfo.Version)
				mu.Unlock()
			}
		},
	})
	srv.AddTool(&sdk.Tool{Name: "read", Description: "Reads.", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "read"}}}, nil
		})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  srv:\n    url: %s\n    auth: requester\n", ts.URL), mcp.Options{})
	b, err := mcpauth.New(mcpauth.NewMemStore(), bytes.Repeat([]byte{7}, 32), mcpauth.Options{RedirectURL: "http://127.0.0.1:1/oauth/callback"})
	if err != nil {
		t.Fatal(err)
	}
	m.SetAuth(b, nil)
	m.Tools() // connects the shared session
	tool, _, ok := m.Lookup("srv__read")
	if !ok {
		t.Fatalf("no srv__read among %v", toolNames(m.Tools()))
	}
	info := tools.CallInfo{Thread: "T1:C1:1.0", Call: "0.0", Attempt: 1, Requester: "U1", Channel: "C1"}
	if _, err := tool.(tools.InfoTool).CallWithInfo(context.Background(), info, json.RawMessage(`{}`)); err != nil {
		t.Fatalf("call as the requester = %v", err)
	}
	cs, _, err := mcp.Dial(context.Background(), tools.MCPServer{Name: "srv", URL: ts.URL}, b, mcpauth.Service, nil, nil)
	if err != nil {
		t.Fatalf("Dial = %v", err)
	}
	_ = cs.Close()
	waitFor(t, "three sessions initialized: shared, the requester's, Dial's", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	for _, g := range got {
		if g != "countersign v9.8.7" {
			t.Errorf("the server was told %v; want countersign v9.8.7 by every session", got)
			break
		}
	}
}
