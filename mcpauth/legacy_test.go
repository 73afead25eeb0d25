package mcpauth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/mcpauth/mcpauthtest"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// A 2025-03-26 server (no protected-resource metadata) whose metadata at
// the root of its origin names an issuer under that origin
// (https://host/oauth): the person connects once and the call runs as
// them, once; the next session needs no new connection.
func TestLegacyMetadataUnderTheServersOrigin(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := mcpauthtest.New(t, mcpauthtest.Options{Legacy: "/oauth"})
	b, err := mcpauth.New(mcpauth.NewMemStore(), key, mcpauth.Options{RedirectURL: redirect})
	if err != nil {
		t.Fatal(err)
	}
	cfg := tools.MCPServer{Name: "tickets", URL: srv.URL(), Auth: tools.AuthRequester}
	var prompts []mcpauth.Prompt
	if got := whoami(t, ctx, cfg, b, "U1", browser(t, b, "U1", &prompts)); got != "you are U1" {
		t.Fatalf("whoami = %q, want you are U1", got)
	}
	if got := whoami(t, ctx, cfg, b, "U1", browser(t, b, "U1", &prompts)); got != "you are U1" || len(prompts) != 1 {
		t.Fatalf("whoami = %q after %d prompts, want U1 with one connection", got, len(prompts))
	}
	if n := srv.Calls("U1"); n != 2 {
		t.Errorf("whoami ran %d times as U1, want 2", n)
	}
}

// Someone's metadata tries to pass for another authorization server:
// nobody is asked to connect and nothing runs, on the 2025-03-26 path
// (an issuer or an endpoint of another origin, or an authorization
// response naming another issuer) and on the current one (a server with
// protected-resource metadata gets the exact issuer check, even for a
// path under its own origin).
func TestMetadataNamingAnotherIssuerIsRefused(t *testing.T) {
	t.Parallel()
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	tests := []struct {
		name    string
		opts    mcpauthtest.Options
		prompts int // -1: some (the client asks again at its next request)
		want    string
	}{
		{"legacy, issuer of another origin", mcpauthtest.Options{Legacy: "/oauth", Issuer: "https://accounts.example.com"}, 0, "accounts.example.com"},
		{"legacy, issuer on another port", mcpauthtest.Options{Legacy: "/oauth", Issuer: other.URL + "/oauth"}, 0, other.URL},
		{"legacy, endpoints of another origin", mcpauthtest.Options{Legacy: "/oauth", EndpointBase: other.URL + "/oauth"}, 0, other.URL},
		{"legacy, a response from another issuer", mcpauthtest.Options{Legacy: "/oauth", ResponseIss: other.URL}, -1, other.URL},
		{"resource metadata, issuer under the origin", mcpauthtest.Options{Issuer: "/oauth"}, 0, "issuer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv := mcpauthtest.New(t, tt.opts)
			b, _ := mcpauth.New(mcpauth.NewMemStore(), key, mcpauth.Options{RedirectURL: redirect})
			cfg := tools.MCPServer{Name: "tickets", URL: srv.URL(), Auth: tools.AuthRequester}
			var prompts []mcpauth.Prompt
			cs, _, err := mcp.Dial(ctx, cfg, b, "U1", browser(t, b, "U1", &prompts), nil)
			if err == nil {
				_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
				cs.Close()
			}
			if err == nil {
				t.Fatalf("metadata naming %s made a connection", srv.Issuer())
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to name %s", err, tt.want)
			}
			if tt.prompts < 0 && len(prompts) == 0 || tt.prompts >= 0 && len(prompts) != tt.prompts {
				t.Errorf("%d prompts, want %d", len(prompts), tt.prompts)
			}
			if srv.Calls("U1") != 0 || srv.Calls("") != 0 {
				t.Error("whoami ran")
			}
			if ok, _ := b.Connected(ctx, mcpauth.Identity{Server: "tickets", User: "U1"}); ok {
				t.Error("a connection was saved")
			}
		})
	}
}

func TestCheckLegacyIssuer(t *testing.T) {
	t.Parallel()
	const o = "https://mcp.example.com"
	tests := []struct {
		issuer         string
		endpoint, same bool
		ok             bool
	}{
		{"https://mcp.example.com", false, true, true},
		{"https://mcp.example.com/", false, true, true},
		{"https://mcp.example.com/oauth", false, false, true},
		{"https://MCP.example.com/oauth", false, false, true},
		{"https://mcp.example.com/oauth?x=1", false, false, false},
		{"https://mcp.example.com/oauth#f", false, false, false},
		{"https://mcp.example.com/oauth/token?x=1", true, false, true},
		{"http://mcp.example.com/oauth", false, false, false},
		{"https://mcp.example.com:8443/oauth", false, false, false},
		{"https://mcp.example.com.evil.example/oauth", false, false, false},
		{"https://user@mcp.example.com/oauth", false, false, false},
		{"https://evil.example/@mcp.example.com", false, false, false},
		{"//mcp.example.com/oauth", false, false, false},
		{"javascript:alert(1)", true, false, false},
		{"", false, false, false},
	}
	for _, tt := range tests {
		same, err := mcpauth.CheckLegacyIssuer(o, tt.issuer, tt.endpoint)
		if (err == nil) != tt.ok || same != tt.same {
			t.Errorf("CheckLegacyIssuer(%q, endpoint %t) = %t, %v; want same %t, ok %t", tt.issuer, tt.endpoint, same, err, tt.same, tt.ok)
		}
	}
}
