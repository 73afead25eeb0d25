package mcpauth_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/mcpauth/mcpauthtest"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

const redirect = "http://127.0.0.1:1/oauth/callback"

var key = bytes.Repeat([]byte{7}, 32)

// browser plays user: it opens the authorization URL logged in as user,
// and brings the redirect's query back to the callback (Complete).
func browser(t *testing.T, b *mcpauth.Broker, user string, prompts *[]mcpauth.Prompt) mcpauth.Prompter {
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return mcpauth.PrompterFunc(func(ctx context.Context, p mcpauth.Prompt) error {
		*prompts = append(*prompts, p)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
		req.Header.Set(mcpauthtest.UserHeader, user)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		loc, err := resp.Location()
		if err != nil {
			t.Errorf("authorize answered %s, want a redirect", resp.Status)
			return err
		}
		if !strings.HasPrefix(loc.String(), redirect) {
			t.Errorf("redirect to %s, want the callback %s", loc, redirect)
		}
		go func() { // the callback, later, from elsewhere
			if _, err := b.Complete(context.Background(), loc.Query()); err != nil {
				t.Errorf("Complete = %v", err)
			}
		}()
		return nil
	})
}

func whoami(t *testing.T, ctx context.Context, cfg tools.MCPServer, b *mcpauth.Broker, user string, p mcpauth.Prompter) string {
	t.Helper()
	cs, list, err := mcp.Dial(ctx, cfg, b, user, p, nil)
	if err != nil {
		t.Fatalf("Dial(%s) = %v", user, err)
	}
	defer cs.Close()
	if len(list) != 1 || list[0].Name != "whoami" {
		t.Fatalf("tools = %v, want whoami", list)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("CallTool = %v", err)
	}
	return res.Content[0].(*sdk.TextContent).Text
}

func TestConnectThenCallAsThePerson(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := mcpauthtest.New(t, mcpauthtest.Options{PublicDiscovery: true})
	store := mcpauth.NewMemStore()
	b, err := mcpauth.New(store, key, mcpauth.Options{RedirectURL: redirect})
	if err != nil {
		t.Fatal(err)
	}
	cfg := tools.MCPServer{Name: "tickets", URL: srv.URL(), Auth: tools.AuthRequester}
	var prompts []mcpauth.Prompt
	if got := whoami(t, ctx, cfg, b, "U1", browser(t, b, "U1", &prompts)); got != "you are U1" {
		t.Fatalf("whoami = %q, want you are U1", got)
	}
	if len(prompts) != 1 || prompts[0].Identity != (mcpauth.Identity{Server: "tickets", User: "U1"}) {
		t.Fatalf("prompts = %+v, want one for U1", prompts)
	}
	// Connected now: no prompt the second time, in a new session.
	if got := whoami(t, ctx, cfg, b, "U1", browser(t, b, "U1", &prompts)); got != "you are U1" || len(prompts) != 1 {
		t.Fatalf("whoami = %q after %d prompts, want U1 without a new prompt", got, len(prompts))
	}
	// The store never holds a token in clear.
	sealed, _ := store.Connection(ctx, "tickets", "U1")
	for _, tok := range srv.Tokens() {
		if bytes.Contains(sealed, []byte(tok)) {
			t.Fatalf("the store holds a token in clear")
		}
	}
	// U1's sealed connection copied to U2 does not make U2 act as U1.
	_ = store.PutConnection(ctx, "tickets", "U2", sealed)
	if ok, _ := b.Connected(ctx, mcpauth.Identity{Server: "tickets", User: "U2"}); ok {
		t.Fatal("a connection copied to another person opens")
	}
	// Without a prompter, a person with no connection is refused, and
	// nothing runs as them.
	cs, _, err := mcp.Dial(ctx, cfg, b, "U3", nil, nil)
	if err == nil {
		_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
		cs.Close()
	}
	if !errors.Is(err, mcpauth.ErrNotConnected) && (err == nil || !strings.Contains(err.Error(), "not connected")) {
		t.Errorf("a call of someone without a connection = %v, want not connected", err)
	}
	if srv.Calls("U3") != 0 || srv.Calls("") != 0 {
		t.Errorf("whoami ran without a person's token")
	}
	// Revoked: asked again.
	if ok, err := b.Revoke(ctx, mcpauth.Identity{Server: "tickets", User: "U1"}); !ok || err != nil {
		t.Fatalf("Revoke = %t, %v", ok, err)
	}
	if got := whoami(t, ctx, cfg, b, "U1", browser(t, b, "U1", &prompts)); got != "you are U1" || len(prompts) != 2 {
		t.Fatalf("after revoke: whoami = %q after %d prompts, want a new prompt", got, len(prompts))
	}
	if n := srv.Calls("U1"); n != 3 {
		t.Errorf("whoami ran %d times as U1, want 3", n)
	}
}

func TestCallbackStateIsSingleUseAndBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := mcpauthtest.New(t, mcpauthtest.Options{PublicDiscovery: true})
	store := mcpauth.NewMemStore()
	b, _ := mcpauth.New(store, key, mcpauth.Options{RedirectURL: redirect})
	cfg := tools.MCPServer{Name: "tickets", URL: srv.URL(), Auth: tools.AuthRequester}
	var seen url.Values
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	p := mcpauth.PrompterFunc(func(ctx context.Context, pr mcpauth.Prompt) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, pr.URL, nil)
		req.Header.Set(mcpauthtest.UserHeader, "U1")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		loc, _ := resp.Location()
		seen = loc.Query()
		// Someone replays the state with a code of their own first: it is
		// taken, and the real redirect then finds nothing.
		forged := url.Values{"state": {seen.Get("state")}, "code": {"forged"}}
		if _, err := b.Complete(ctx, forged); err != nil {
			t.Errorf("first Complete = %v", err)
		}
		if _, err := b.Complete(ctx, seen); !errors.Is(err, mcpauth.ErrNoState) {
			t.Errorf("second Complete = %v, want ErrNoState", err)
		}
		return nil
	})
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cs, _, err := mcp.Dial(wctx, cfg, b, "U1", p, nil)
	if err == nil {
		_, err = cs.CallTool(wctx, &sdk.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
		cs.Close()
	}
	if err == nil {
		t.Fatal("a forged code made a connection")
	}
	if srv.Calls("U1") != 0 {
		t.Error("whoami ran as U1 with a forged code")
	}
	if _, err := b.Complete(ctx, url.Values{"state": {"unknown"}, "code": {"x"}}); !errors.Is(err, mcpauth.ErrNoState) {
		t.Errorf("Complete(unknown state) = %v, want ErrNoState", err)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		good bool
	}{
		{strings.Repeat("ab", 32), true},
		{strings.Repeat("A", 42) + "==", false}, // 31 bytes
		{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", true},
		{"short", false},
	}
	for _, tt := range tests {
		_, err := mcpauth.ParseKey(tt.in)
		if (err == nil) != tt.good {
			t.Errorf("ParseKey(%q) = %v, want ok %t", tt.in, err, tt.good)
		}
	}
	k, generated, err := mcpauth.KeyFromEnv(func(string) string { return "" })
	if err != nil || !generated || len(k) != 32 {
		t.Errorf("KeyFromEnv(unset) = %d bytes, %t, %v; want a generated key", len(k), generated, err)
	}
}

// A token about to expire is renewed with the refresh token, without the
// person, and the renewed one is sealed and saved.
func TestRenewedTokenIsSaved(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// oauth2 renews a token within 10s of its expiry: 5s tokens are
	// renewed at their next use.
	srv := mcpauthtest.New(t, mcpauthtest.Options{PublicDiscovery: true, TokenTTL: 5 * time.Second})
	store := mcpauth.NewMemStore()
	b, _ := mcpauth.New(store, key, mcpauth.Options{RedirectURL: redirect})
	cfg := tools.MCPServer{Name: "tickets", URL: srv.URL(), Auth: tools.AuthRequester}
	var prompts []mcpauth.Prompt
	whoami(t, ctx, cfg, b, "U1", browser(t, b, "U1", &prompts))
	first, _ := store.Connection(ctx, "tickets", "U1")
	if got := whoami(t, ctx, cfg, b, "U1", browser(t, b, "U1", &prompts)); got != "you are U1" || len(prompts) != 1 {
		t.Fatalf("whoami = %q after %d prompts, want U1 renewed without a prompt", got, len(prompts))
	}
	second, _ := store.Connection(ctx, "tickets", "U1")
	if bytes.Equal(first, second) {
		t.Error("the renewed token was not saved")
	}
	if n := len(srv.Tokens()); n < 4 {
		t.Errorf("%d tokens issued, want a renewal", n)
	}
	for _, tok := range srv.Tokens() {
		if bytes.Contains(second, []byte(tok)) {
			t.Fatal("the store holds a renewed token in clear")
		}
	}
	list, _ := b.Connections(ctx, "", "U1")
	if len(list) != 1 || !list[0].Refreshable {
		t.Errorf("Connections = %+v, want one renewable connection", list)
	}
}
