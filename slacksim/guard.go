package slacksim

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
)

// The page's guard. The playground acts for every simulated person, so a
// web page from elsewhere must not be able to drive it: not by posting to
// it (the token below), and not through DNS rebinding, where a name the
// attacker controls comes to point at 127.0.0.1 and the browser then
// treats the playground as that page's own origin (the Host check).
const (
	// TokenHeader carries the page token on the page's requests.
	TokenHeader = "X-Playground-Token"
	// tokenParam carries it on the event stream, which browsers open
	// without custom headers.
	tokenParam = "token"
	// tokenMeta is the name of the meta element the page reads it from.
	tokenMeta = "playground-token"
)

// newPageToken returns a random token for a simulator's page.
func newPageToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// PageToken is the token the page sends with every request to /ui/ and
// /events (header X-Playground-Token, or ?token= on /events). It is made
// when the simulator is, embedded in the page it serves, and never sent
// anywhere else.
func (s *Simulator) PageToken() string { return s.token }

// IsLoopbackHost reports whether a request's Host header names this
// machine's loopback interface: 127.0.0.1, localhost or [::1], with any
// port.
func IsLoopbackHost(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		h = host[1 : len(host)-1]
	}
	switch strings.ToLower(strings.TrimSuffix(h, ".")) {
	case "127.0.0.1", "localhost", "::1":
		return true
	}
	return false
}

// guard refuses requests whose Host is not loopback, and UI requests
// (everything but the page and its static files) without the page token.
func (s *Simulator) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !IsLoopbackHost(r.Host) {
			http.Error(w, "the playground answers only on localhost, 127.0.0.1 or [::1]", http.StatusForbidden)
			return
		}
		if r.URL.Path != "/" && !strings.HasPrefix(r.URL.Path, "/static/") && !s.tokenOK(r) {
			writeJSON(w, http.StatusForbidden, map[string]any{"ok": false, "error": "missing or wrong page token: reload the page"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// tokenOK reports whether a request carries the page token.
func (s *Simulator) tokenOK(r *http.Request) bool {
	got := r.Header.Get(TokenHeader)
	if got == "" && r.URL.Path == "/events" {
		got = r.URL.Query().Get(tokenParam)
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) == 1
}

// pageWithToken is index.html with the page token in a meta element,
// where the page's script reads it.
func (s *Simulator) pageWithToken(index []byte) []byte {
	meta := []byte(`<meta charset="utf-8">` + "\n" + `<meta name="` + tokenMeta + `" content="` + s.token + `">`)
	return bytes.Replace(index, []byte(`<meta charset="utf-8">`), meta, 1)
}
