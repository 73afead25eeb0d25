package slacksim

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strings"
)

// The page's guard. The playground acts for every simulated person, so
// only whoever has the page's URL may drive it. Not another process on
// the machine, a tool's included: the page is served only to a browser
// that opened the URL with its access token (see PageURL), which leaves a
// cookie. Not a web page from elsewhere: not by posting to the UI (the
// page token below), and not through DNS rebinding, where a name the
// attacker controls comes to point at 127.0.0.1 and the browser then
// treats the playground as that page's own origin (the Host check).
const (
	// accessParam carries the access token in the URL the bot prints.
	accessParam = "token"
	// accessCookie is the name of the cookie the access token is kept in,
	// followed by the port, so that two playgrounds on one machine keep
	// theirs apart.
	accessCookie = "countersign_playground"
	// TokenHeader carries the page token on the page's requests.
	TokenHeader = "X-Playground-Token"
	// tokenParam carries it on the event stream, which browsers open
	// without custom headers.
	tokenParam = "token"
	// tokenMeta is the name of the meta element the page reads it from.
	tokenMeta = "playground-token"
)

// newPageToken returns a random token for a simulator's page.
func newPageToken() string { return randomToken(16) }

// randomToken returns n random bytes in hex.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// PageURL is the URL that opens the page for the simulator served at
// base (as http://127.0.0.1:3000): base/?token= and the access token, a
// random secret made with the simulator. The page answers only a browser
// that opened this URL: the first request stores the token in an
// HttpOnly, SameSite=Strict cookie and redirects to base/, so that the
// token does not stay in the address bar, the history or a Referer.
// Whoever has this URL can act as any of the playground's people: show it
// to the person running the playground, and log it nowhere else.
func (s *Simulator) PageURL(base string) string {
	return strings.TrimSuffix(base, "/") + "/?" + accessParam + "=" + s.access
}

// PageToken is the token the page sends with every request to /ui/ and
// /events (header X-Playground-Token, or ?token= on /events). It is made
// when the simulator is, embedded in the page it serves to a browser
// that opened PageURL, and never sent anywhere else.
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
// The page itself guards its token: see page.
func (s *Simulator) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !IsLoopbackHost(r.Host) {
			http.Error(w, "the playground answers only on localhost, 127.0.0.1 or [::1]", http.StatusForbidden)
			return
		}
		if r.URL.Path != "/" && !strings.HasPrefix(r.URL.Path, "/static/") && !s.tokenOK(r) {
			writeJSON(w, http.StatusForbidden, map[string]any{"ok": false, "error": "missing or wrong page token: open the page with the URL the bot printed at start"})
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

// accessOK reports whether got is the access token.
func (s *Simulator) accessOK(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.access)) == 1
}

// cookieName is the name of the access cookie for a request's Host.
func cookieName(host string) string {
	if _, port, err := net.SplitHostPort(host); err == nil && port != "" {
		return accessCookie + "_" + port
	}
	return accessCookie
}

// page serves GET /: the page, with its token, to a browser that has the
// access cookie; to one that opens PageURL, the cookie and a redirect to
// the page without the token in its URL; to anyone else, 403 and a page
// saying which URL to open.
func (s *Simulator) page(page []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w)
		w.Header().Set("Cache-Control", "no-store")
		if q := r.URL.Query(); q.Has(accessParam) {
			if !s.accessOK(q.Get(accessParam)) {
				s.log.WithField("path", r.URL.Path).Info("page refused: wrong access token in its URL")
				refusePage(w)
				return
			}
			http.SetCookie(w, &http.Cookie{
				Name: cookieName(r.Host), Value: s.access, Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode,
			})
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		if c, err := r.Cookie(cookieName(r.Host)); err != nil || !s.accessOK(c.Value) {
			refusePage(w)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	}
}

// refusedPage is what GET / answers without the access token.
const refusedPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Countersign playground</title></head>
<body><h1>Open the playground with its URL</h1>
<p>This page opens only from the URL the bot printed when it started:
<code>Countersign playground: open http://…/?token=… in a browser.</code>
Copy that whole line's URL, token included. A bot that restarted printed a new one.</p>
</body></html>
`

// refusePage answers 403 with refusedPage.
func refusePage(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	_, _ = io.WriteString(w, refusedPage)
}

// pageWithToken is index.html with the page token in a meta element,
// where the page's script reads it.
func (s *Simulator) pageWithToken(index []byte) []byte {
	meta := []byte(`<meta charset="utf-8">` + "\n" + `<meta name="` + tokenMeta + `" content="` + s.token + `">`)
	return bytes.Replace(index, []byte(`<meta charset="utf-8">`), meta, 1)
}
