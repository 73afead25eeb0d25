package mcpauth_test

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/mcpauth/mcpauthtest"
	"github.com/countersign/countersign/tools"
)

// A person connects ahead of any call, whether the server asks for a
// token at once or only at a call; their list shows the connection, and
// nobody else's.
func TestConnectAheadAndListOnesOwn(t *testing.T) {
	t.Parallel()
	for _, public := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv := mcpauthtest.New(t, mcpauthtest.Options{PublicDiscovery: public})
		b, err := mcpauth.New(mcpauth.NewMemStore(), key, mcpauth.Options{RedirectURL: redirect})
		if err != nil {
			t.Fatal(err)
		}
		cfg := tools.MCPServer{Name: "tickets", URL: srv.URL(), Auth: tools.AuthRequester}
		var prompts []mcpauth.Prompt
		if err := b.Connect(ctx, cfg, mcpauth.Identity{Server: "tickets", User: "U1"}, browser(t, b, "U1", &prompts)); err != nil {
			t.Fatalf("public discovery %t: Connect = %v", public, err)
		}
		if len(prompts) != 1 {
			t.Fatalf("public discovery %t: %d prompts, want 1", public, len(prompts))
		}
		// Connected: no second prompt.
		if err := b.Connect(ctx, cfg, mcpauth.Identity{Server: "tickets", User: "U1"}, browser(t, b, "U1", &prompts)); err != nil || len(prompts) != 1 {
			t.Fatalf("Connect again = %v after %d prompts, want nil without a prompt", err, len(prompts))
		}
		mine, err := b.Personal(ctx, "U1", []string{"wiki", "tickets"})
		if err != nil || len(mine) != 2 || mine[0].Server != "tickets" || mine[0].Connection == nil || mine[1].Connection != nil {
			t.Fatalf("Personal(U1) = %+v, %v; want tickets connected, wiki not", mine, err)
		}
		if mine[0].Connection.Connected.IsZero() {
			t.Errorf("the connection does not say since when")
		}
		theirs, err := b.Personal(ctx, "U2", []string{"tickets"})
		if err != nil || len(theirs) != 1 || theirs[0].Connection != nil {
			t.Errorf("Personal(U2) = %+v, %v; want tickets without a connection", theirs, err)
		}
		if got := whoami(t, ctx, cfg, b, "U1", nil); got != "you are U1" {
			t.Errorf("a call after connecting ahead = %q, want it to run as U1", got)
		}
	}
}
