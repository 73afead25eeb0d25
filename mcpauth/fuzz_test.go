package mcpauth

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// A sealed value, however it was changed, opens only as what was sealed
// for that identity, and never panics.
func FuzzOpen(f *testing.F) {
	s, _ := newSealer(bytes.Repeat([]byte{1}, 32))
	good, _ := s.seal(Identity{"a", "U1"}, []byte(`{"access_token":"x"}`)) // a seed; workers seal their own
	f.Add(good, "a", "U1")
	f.Add([]byte{1}, "a", "U1")
	f.Add([]byte{}, "", "")
	f.Fuzz(func(t *testing.T, sealed []byte, server, user string) {
		id := Identity{server, user}
		plain, err := s.open(id, sealed)
		if err == nil && (string(plain) != `{"access_token":"x"}` || id != (Identity{"a", "U1"})) {
			t.Fatalf("open(%q, %x) = %q, want ErrOpen", id, sealed, plain)
		}
		if err != nil && !errors.Is(err, ErrOpen) {
			t.Fatalf("open = %v, want ErrOpen", err)
		}
		resealed, err := s.seal(id, sealed)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := s.open(id, resealed); err != nil || !bytes.Equal(back, sealed) {
			t.Fatalf("round trip = %q, %v", back, err)
		}
		if bytes.Contains(resealed, sealed) && len(sealed) > 8 {
			t.Fatalf("the sealed value holds the plain text")
		}
	})
}

// ParseKey takes 32 bytes in hex or base64, and nothing else.
func FuzzParseKey(f *testing.F) {
	f.Add("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	f.Add("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err == nil && len(k) != 32 {
			t.Fatalf("ParseKey(%q) = %d bytes", s, len(k))
		}
		if err != nil && !errors.Is(err, ErrBadKey) {
			t.Fatalf("ParseKey(%q) = %v", s, err)
		}
	})
}

// The callback takes any query: an unknown state is ErrNoState, and a
// known one is used once.
func FuzzCallbackQuery(f *testing.F) {
	f.Add("state=S&code=C")
	f.Add("state=S&error=access_denied&error_description=%00%0a")
	f.Add("code=C")
	f.Add("state=" + string(bytes.Repeat([]byte("x"), 600)))
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		store := NewMemStore()
		b, _ := New(store, bytes.Repeat([]byte{1}, 32), Options{RedirectURL: "http://127.0.0.1/cb"})
		ctx := context.Background()
		if _, err := b.Complete(ctx, q); !errors.Is(err, ErrNoState) {
			t.Fatalf("Complete(%q) without a request = %v, want ErrNoState", raw, err)
		}
		state := q.Get("state")
		if state == "" || len(state) > 512 {
			return
		}
		_ = store.PutAuthState(ctx, state, []byte(`{"identity":{"server":"a","user":"U1"},"expires":"2999-01-01T00:00:00Z"}`), 60e9)
		_, err = b.Complete(ctx, q)
		if err != nil && !errors.Is(err, ErrDenied) {
			t.Fatalf("Complete(%q) = %v", raw, err)
		}
		if _, err := b.Complete(ctx, q); !errors.Is(err, ErrNoState) {
			t.Fatalf("second Complete(%q) = %v, want ErrNoState", raw, err)
		}
	})
}

// The WWW-Authenticate challenges the bot reads (with the SDK's parser)
// never panic it, whatever a server sends.
func FuzzWWWAuthenticate(f *testing.F) {
	f.Add(`Bearer resource_metadata="https://h/.well-known/oauth-protected-resource/mcp", scope="a b"`)
	f.Add(`Bearer error="insufficient_scope", scope="a", Basic realm="x"`)
	f.Add(`Bearer realm="a\"b", , ,`)
	f.Fuzz(func(t *testing.T, h string) {
		cs, err := oauthex.ParseWWWAuthenticate([]string{h})
		if err != nil {
			return
		}
		for _, c := range cs {
			_ = c.Params["resource_metadata"]
		}
	})
}

// An issuer (or endpoint) a 2025-03-26 server's metadata names is
// accepted only when a URL parser reads it as the server's own origin,
// and never panics.
func FuzzCheckLegacyIssuer(f *testing.F) {
	for _, s := range []string{"https://mcp.example.com/oauth", "https://mcp.example.com", "https://user@mcp.example.com/", "https://mcp.example.com.evil/x",
		"https://evil/@mcp.example.com", "HTTPS://MCP.EXAMPLE.COM/a?b#c", "https://mcp.example.com\\@evil/", "https://mcp.example.com%2f@evil/"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	const o = "https://mcp.example.com"
	f.Fuzz(func(t *testing.T, issuer string, endpoint bool) {
		same, err := CheckLegacyIssuer(o, issuer, endpoint)
		if err != nil {
			if same || !errors.Is(err, ErrForeignIssuer) {
				t.Fatalf("CheckLegacyIssuer(%q) = %t, %v", issuer, same, err)
			}
			return
		}
		u, perr := url.Parse(issuer)
		if perr != nil || origin(u) != o || u.User != nil {
			t.Fatalf("CheckLegacyIssuer accepted %q, read as %v", issuer, u)
		}
		if !endpoint && (u.RawQuery != "" || u.Fragment != "") {
			t.Fatalf("CheckLegacyIssuer accepted an issuer with a query or fragment: %q", issuer)
		}
		if same && endpoint {
			t.Fatalf("an endpoint is never the issuer")
		}
	})
}

// An identity provider's metadata gives a token endpoint only when it
// names the configured issuer and an https (or loopback http) endpoint,
// and never panics.
func FuzzParseIdPMetadata(f *testing.F) {
	f.Add("https://idp.example.com", []byte(`{"issuer":"https://idp.example.com","token_endpoint":"https://idp.example.com/token"}`))
	f.Add("https://idp.example.com/", []byte(`{"issuer":"https://idp.example.com","token_endpoint":"http://127.0.0.1:1/token"}`))
	f.Add("https://idp.example.com", []byte(`{"issuer":"https://evil.example","token_endpoint":"https://evil.example/token"}`))
	f.Add("https://idp.example.com", []byte(`{"issuer":"https://idp.example.com","token_endpoint":"javascript:alert(1)"}`))
	f.Add("", []byte(`{}`))
	f.Fuzz(func(t *testing.T, issuer string, doc []byte) {
		ep, err := ParseIdPMetadata(issuer, doc)
		if err != nil {
			if !errors.Is(err, ErrIdPMetadata) || ep != "" {
				t.Fatalf("ParseIdPMetadata = %q, %v", ep, err)
			}
			return
		}
		u, perr := url.Parse(ep)
		if perr != nil || u.Host == "" || u.Scheme != "https" && !(u.Scheme == "http" && loopback(u.Hostname())) {
			t.Fatalf("ParseIdPMetadata accepted token endpoint %q", ep)
		}
		if iu, err := url.Parse(issuer); err != nil || iu.Host == "" {
			t.Fatalf("ParseIdPMetadata accepted a document for issuer %q", issuer)
		}
	})
}
