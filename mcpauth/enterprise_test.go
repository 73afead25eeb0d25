package mcpauth_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/mcpauth/mcpauthtest"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

const serverClientSecret = "cs-secret-at-tickets"

func enterpriseServer(t *testing.T, idp *mcpauthtest.IdP) (*mcpauthtest.Server, tools.MCPServer) {
	srv := mcpauthtest.New(t, mcpauthtest.Options{Assertions: idp.Assertion, Client: [2]string{"countersign", serverClientSecret}})
	return srv, tools.MCPServer{Name: "tickets", URL: srv.URL(), Auth: tools.AuthRequester, OAuth: tools.MCPOAuth{
		ClientID: "countersign", ClientSecret: serverClientSecret, Grant: tools.GrantAuthorizationCode,
		IdentityProvider: &tools.MCPIdentityProvider{Issuer: idp.URL(), ClientID: "countersign-at-idp"},
	}}
}

// Enterprise-managed authorization: the person signs in at their
// identity provider once (the Connect prompt), their ID token is
// exchanged there for an identity assertion grant, and that for a token
// of the server: the call runs as them. The token is kept, sealed, until
// it expires; each person gets their own.
func TestEnterpriseManagedConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idp := mcpauthtest.NewIdP(t)
	srv, cfg := enterpriseServer(t, idp)
	store := mcpauth.NewMemStore()
	b, err := mcpauth.New(store, key, mcpauth.Options{RedirectURL: redirect})
	if err != nil {
		t.Fatal(err)
	}
	var prompts []mcpauth.Prompt
	if got := whoami(t, ctx, cfg, b, "U1", browser(t, b, "U1", &prompts)); got != "you are U1" {
		t.Fatalf("whoami = %q, want you are U1", got)
	}
	if len(prompts) != 1 || !strings.HasPrefix(prompts[0].URL, idp.URL()+"/authorize") || idp.Exchanges() != 1 {
		t.Fatalf("prompts = %+v, %d exchanges; want one sign-in at the identity provider and one exchange", prompts, idp.Exchanges())
	}
	if got := whoami(t, ctx, cfg, b, "U1", browser(t, b, "U1", &prompts)); got != "you are U1" || len(prompts) != 1 || idp.Exchanges() != 1 {
		t.Fatalf("whoami = %q after %d prompts and %d exchanges, want the kept token", got, len(prompts), idp.Exchanges())
	}
	if got := whoami(t, ctx, cfg, b, "U2", browser(t, b, "U2", &prompts)); got != "you are U2" {
		t.Fatalf("whoami = %q, want you are U2", got)
	}
	if srv.Calls("U1") != 2 || srv.Calls("U2") != 1 {
		t.Errorf("whoami ran %d times as U1 and %d as U2, want 2 and 1", srv.Calls("U1"), srv.Calls("U2"))
	}
	sealed, _ := store.Connection(ctx, "tickets", "U1")
	for _, tok := range srv.Tokens() {
		if bytes.Contains(sealed, []byte(tok)) {
			t.Fatal("the store holds a token in clear")
		}
	}
}

// Someone tries to get a token another way: an identity provider whose
// metadata names another issuer, a client that is not the one the
// server knows, nobody to sign in: nothing runs and nothing is kept.
func TestEnterpriseManagedRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(idp *mcpauthtest.IdP, cfg *tools.MCPServer, opts *mcpauth.Options)
		want  string
	}{
		{"identity provider names another issuer", func(idp *mcpauthtest.IdP, _ *tools.MCPServer, _ *mcpauth.Options) {
			idp.SetIssuer("https://idp.example.com")
		}, "idp.example.com"},
		{"another client at the server", func(_ *mcpauthtest.IdP, cfg *tools.MCPServer, _ *mcpauth.Options) {
			cfg.OAuth.ClientSecret = "guessed"
		}, "invalid_client"},
		{"an ID token the identity provider does not know", func(_ *mcpauthtest.IdP, _ *tools.MCPServer, opts *mcpauth.Options) {
			opts.IDToken = func(context.Context, mcpauth.Identity) (string, error) { return "idt-forged", nil }
		}, "invalid_grant"},
		{"nobody to sign in", func(_ *mcpauthtest.IdP, _ *tools.MCPServer, _ *mcpauth.Options) {}, "not connected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			idp := mcpauthtest.NewIdP(t)
			srv, cfg := enterpriseServer(t, idp)
			opts := mcpauth.Options{RedirectURL: redirect}
			if tt.name != "nobody to sign in" {
				opts.IDToken = func(_ context.Context, id mcpauth.Identity) (string, error) { return idp.IDToken(id.User), nil }
			}
			tt.setup(idp, &cfg, &opts)
			b, _ := mcpauth.New(mcpauth.NewMemStore(), key, opts)
			cs, _, err := mcp.Dial(ctx, cfg, b, "U1", nil, nil)
			if err == nil {
				_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
				cs.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Dial = %v, want an error with %q", err, tt.want)
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

// A kept enterprise-managed token that expired cannot be renewed: the
// identity no longer counts as connected, and a call the server refuses
// exchanges the person's ID token again, without asking them.
func TestEnterpriseManagedTokenExpires(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idp := mcpauthtest.NewIdP(t)
	srv := mcpauthtest.New(t, mcpauthtest.Options{Assertions: idp.Assertion, Client: [2]string{"countersign", serverClientSecret}, TokenTTL: 30 * time.Second})
	_, cfg := enterpriseServer(t, idp)
	cfg.URL = srv.URL()
	now := time.Now()
	b, _ := mcpauth.New(mcpauth.NewMemStore(), key, mcpauth.Options{RedirectURL: redirect, Now: func() time.Time { return now },
		IDToken: func(_ context.Context, id mcpauth.Identity) (string, error) { return idp.IDToken(id.User), nil }})
	var prompts []mcpauth.Prompt
	if got := whoami(t, ctx, cfg, b, "U1", browser(t, b, "U1", &prompts)); got != "you are U1" || idp.Exchanges() != 1 {
		t.Fatalf("whoami = %q after %d exchanges", got, idp.Exchanges())
	}
	id := mcpauth.Identity{Server: "tickets", User: "U1"}
	if ok, _ := b.Connected(ctx, id); !ok {
		t.Fatal("not connected right after the exchange")
	}
	now = now.Add(time.Minute)
	if ok, _ := b.Connected(ctx, id); ok {
		t.Error("connected with an expired token that cannot be renewed")
	}
	now = time.Now()
	srv.Revoke("U1") // the server refuses the kept token, as it would once it expired
	if got := whoami(t, ctx, cfg, b, "U1", browser(t, b, "U1", &prompts)); got != "you are U1" || idp.Exchanges() != 2 || len(prompts) != 0 {
		t.Fatalf("whoami = %q after %d exchanges and %d prompts, want a new exchange", got, idp.Exchanges(), len(prompts))
	}
}
