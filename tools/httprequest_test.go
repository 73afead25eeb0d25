package tools_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/countersign/countersign/tools"
)

// args builds http_request arguments.
func args(t *testing.T, method, u string, extra ...func(map[string]any)) json.RawMessage {
	t.Helper()
	m := map[string]any{"method": method, "url": u}
	for _, f := range extra {
		f(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hostPort returns "127.0.0.1:port" of a test server.
func hostPort(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// countingServer answers every request with handler and counts them.
func countingServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestHTTPRequestResult(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Ignored", "1")
			fmt.Fprint(w, `{"ok":true}`)
		case "/missing":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, "no such thing")
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/binary":
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte{0x89, 'P', 'N', 'G', 0, 0, 0})
		}
	})
	h := tools.NewHTTPRequest(tools.HTTPOptions{})

	tests := []struct {
		name   string
		method string
		path   string
		want   string
	}{
		{"ok", "GET", "/ok", "HTTP 200 OK\nContent-Type: application/json\n\n{\"ok\":true}"},
		{"lower-case method", "get", "/ok", "HTTP 200 OK\nContent-Type: application/json\n\n{\"ok\":true}"},
		{"not found is a result", "GET", "/missing", "HTTP 404 Not Found\nContent-Type: text/plain\n\nno such thing"},
		{"no content", "DELETE", "/empty", "HTTP 204 No Content\n\n(empty body)"},
		{"head", "HEAD", "/ok", "HTTP 200 OK\nContent-Type: application/json\n\n(empty body)"},
		{"binary", "GET", "/binary", "HTTP 200 OK\nContent-Type: image/png\n\n[binary body of 7 bytes not shown]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := h.Call(t.Context(), args(t, tt.method, srv.URL+tt.path))
			if err != nil {
				t.Fatalf("Call(%s %s) error = %v", tt.method, tt.path, err)
			}
			if got != tt.want {
				t.Errorf("Call(%s %s) = %q, want %q", tt.method, tt.path, got, tt.want)
			}
		})
	}
}

func TestHTTPRequestSendsMethodHeadersAndBody(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, auth, contentType, body string
	}
	got := make(chan seen, 1)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), string(b)}
	})
	h := tools.NewHTTPRequest(tools.HTTPOptions{})

	a := args(t, "post", srv.URL, func(m map[string]any) {
		m["headers"] = map[string]string{"Authorization": "Bearer t0k", "content-type": "application/json"}
		m["body"] = `{"name":"x"}`
	})
	if _, err := h.Call(t.Context(), a); err != nil {
		t.Fatalf("Call(%s) error = %v", a, err)
	}
	want := seen{"POST", "Bearer t0k", "application/json", `{"name":"x"}`}
	if s := <-got; s != want {
		t.Errorf("server saw %+v, want %+v", s, want)
	}
}

func TestHTTPRequestAllowHosts(t *testing.T) {
	t.Parallel()
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	})
	port := strings.TrimPrefix(hostPort(t, srv), "127.0.0.1:")

	tests := []struct {
		name  string
		allow []string
		url   string
		ok    bool
	}{
		{"no list allows any host", nil, srv.URL, true},
		{"ip on any port", []string{"127.0.0.1"}, srv.URL, true},
		{"ip with its port", []string{"127.0.0.1:" + port}, srv.URL, true},
		{"ip with another port", []string{"127.0.0.1:1"}, srv.URL, false},
		{"other host", []string{"api.example.com"}, srv.URL, false},
		{"name is not resolved", []string{"localhost"}, srv.URL, false},
		{"one of several", []string{"api.example.com", "127.0.0.1"}, srv.URL, true},
		{"unparsable entry matches nothing", []string{"http://127.0.0.1/"}, srv.URL, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tools.NewHTTPRequest(tools.HTTPOptions{AllowHosts: tt.allow})
			before := hits.Load()
			got, err := h.Call(t.Context(), args(t, "GET", tt.url))
			if tt.ok {
				if err != nil || !strings.HasSuffix(got, "hello") {
					t.Errorf("Call(%s) with %v = %q, %v; want the body", tt.url, tt.allow, got, err)
				}
				return
			}
			if !errors.Is(err, tools.ErrHostNotAllowed) {
				t.Errorf("Call(%s) with %v = %q, %v; want ErrHostNotAllowed", tt.url, tt.allow, got, err)
			}
			if hits.Load() != before {
				t.Errorf("Call(%s) with %v reached the server", tt.url, tt.allow)
			}
		})
	}
}

// roundTripFunc answers requests without a network.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestHTTPRequestHostPatterns(t *testing.T) {
	t.Parallel()
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{
			StatusCode: http.StatusOK,
			Status:     "200 OK",
			Header:     http.Header{},
			Body:       io.NopCloser(strings.NewReader("")),
			Request:    r,
		}, nil
	})}

	tests := []struct {
		allow string
		url   string
		ok    bool
	}{
		{"api.example.com", "https://api.example.com/v1", true},
		{"api.example.com", "https://API.Example.com./v1", true},
		{"api.example.com", "http://api.example.com:8080/", true},
		{"api.example.com", "https://example.com/", false},
		{"api.example.com", "https://evil.api.example.com/", false},
		{"api.example.com", "https://api.example.com@evil.com/", false},
		{"api.example.com:8080", "http://api.example.com:8080/", true},
		{"api.example.com:8080", "http://api.example.com/", false},
		{"api.example.com:443", "https://api.example.com/", true},
		{"api.example.com:443", "http://api.example.com/", false},
		{"api.example.com:80", "http://api.example.com/", true},
		{"::1", "http://[::1]:9000/", true},
		{"[::1]:9000", "http://[::1]:9000/", true},
		{"[::1]:9000", "http://[::1]:9001/", false},
	}
	for _, tt := range tests {
		h := tools.NewHTTPRequest(tools.HTTPOptions{AllowHosts: []string{tt.allow}, Client: client})
		_, err := h.Call(t.Context(), args(t, "GET", tt.url))
		if got := err == nil; got != tt.ok {
			t.Errorf("Call(%s) with allow %q: err = %v, want allowed %v", tt.url, tt.allow, err, tt.ok)
		}
		if err != nil && !errors.Is(err, tools.ErrHostNotAllowed) && !errors.Is(err, tools.ErrUnclearURL) {
			t.Errorf("Call(%s) with allow %q: err = %v, want ErrHostNotAllowed or ErrUnclearURL", tt.url, tt.allow, err)
		}
	}
}

func TestHTTPRequestRedirects(t *testing.T) {
	t.Parallel()
	target, targetHits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "arrived")
	})
	origin, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/landing", http.StatusFound)
	})

	t.Run("to an allowed host is followed", func(t *testing.T) {
		h := tools.NewHTTPRequest(tools.HTTPOptions{AllowHosts: []string{hostPort(t, origin), hostPort(t, target)}})
		got, err := h.Call(t.Context(), args(t, "GET", origin.URL))
		if err != nil {
			t.Fatalf("Call(%s) error = %v", origin.URL, err)
		}
		want := "HTTP 200 OK\nContent-Type: text/plain; charset=utf-8\nRedirected to: " + target.URL + "/landing\n\narrived"
		if got != want {
			t.Errorf("Call(%s) = %q, want %q", origin.URL, got, want)
		}
	})

	t.Run("to a host not allowed is refused", func(t *testing.T) {
		before := targetHits.Load()
		h := tools.NewHTTPRequest(tools.HTTPOptions{AllowHosts: []string{hostPort(t, origin)}})
		got, err := h.Call(t.Context(), args(t, "GET", origin.URL))
		if err != nil {
			t.Fatalf("Call(%s) error = %v", origin.URL, err)
		}
		for _, want := range []string{
			"HTTP 302 Found\n",
			"Location: " + target.URL + "/landing\n",
			"Note: redirect to " + target.URL + "/landing not followed: host " + hostPort(t, target) + " is not allowed\n",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("Call(%s) = %q, want it to contain %q", origin.URL, got, want)
			}
		}
		if targetHits.Load() != before {
			t.Errorf("Call(%s) followed the redirect", origin.URL)
		}
	})

	t.Run("without a policy, to another host is returned to the model", func(t *testing.T) {
		before := targetHits.Load()
		h := tools.NewHTTPRequest(tools.HTTPOptions{})
		got, err := h.Call(t.Context(), args(t, "GET", origin.URL))
		if err != nil {
			t.Fatalf("Call(%s) error = %v", origin.URL, err)
		}
		for _, want := range []string{"HTTP 302 Found\n", "Location: " + target.URL + "/landing\n", "not followed"} {
			if !strings.Contains(got, want) {
				t.Errorf("Call(%s) = %q, want it to contain %q", origin.URL, got, want)
			}
		}
		if targetHits.Load() != before {
			t.Errorf("Call(%s) followed the redirect to another host", origin.URL)
		}
	})

	t.Run("without a policy, on the same host is followed", func(t *testing.T) {
		same, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/old" {
				http.Redirect(w, r, "/new", http.StatusMovedPermanently)
				return
			}
			fmt.Fprint(w, "moved here")
		})
		h := tools.NewHTTPRequest(tools.HTTPOptions{})
		got, err := h.Call(t.Context(), args(t, "GET", same.URL+"/old"))
		if err != nil {
			t.Fatalf("Call(%s) error = %v", same.URL, err)
		}
		if !strings.HasPrefix(got, "HTTP 200 OK") || !strings.HasSuffix(got, "moved here") {
			t.Errorf("Call(%s/old) = %q, want the page it redirects to", same.URL, got)
		}
	})

	t.Run("loops stop", func(t *testing.T) {
		loop, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/again", http.StatusFound)
		})
		h := tools.NewHTTPRequest(tools.HTTPOptions{})
		got, err := h.Call(t.Context(), args(t, "GET", loop.URL))
		if err != nil {
			t.Fatalf("Call(%s) error = %v", loop.URL, err)
		}
		if !strings.Contains(got, "Note: stopped after 5 redirects") {
			t.Errorf("Call(%s) = %q, want a note that it stopped", loop.URL, got)
		}
		if n := hits.Load(); n != 6 {
			t.Errorf("server got %d requests, want 6 (the call and 5 redirects)", n)
		}
	})
}

func TestHTTPRequestTruncatesBody(t *testing.T) {
	t.Parallel()
	// "é" and "€" take 2 and 3 bytes, so a byte limit falls inside them.
	body := strings.Repeat("aé€", 100) // 600 bytes
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, body)
	})

	tests := []struct {
		maxBody   int
		wantShown string
	}{
		{1, "a"},
		{2, "a"},
		{3, "aé"},
		{4, "aé"},
		{5, "aé"},
		{6, "aé€"},
		{600, body},
		{1000, body},
	}
	for _, tt := range tests {
		h := tools.NewHTTPRequest(tools.HTTPOptions{MaxBody: tt.maxBody})
		got, err := h.Call(t.Context(), args(t, "GET", srv.URL))
		if err != nil {
			t.Fatalf("Call with MaxBody %d: error = %v", tt.maxBody, err)
		}
		_, text, _ := strings.Cut(got, "\n\n")
		want := tt.wantShown
		if cut := len(body) - len(tt.wantShown); cut > 0 {
			want += fmt.Sprintf("\n[… %d more bytes not shown]", cut)
		}
		if text != want {
			t.Errorf("Call with MaxBody %d: body = %q, want %q", tt.maxBody, text, want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("Call with MaxBody %d = %q, not valid UTF-8", tt.maxBody, got)
		}
	}
}

func TestHTTPRequestLongBodyCountsAtLeast(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 3<<20)))
	})
	h := tools.NewHTTPRequest(tools.HTTPOptions{MaxBody: 10})
	got, err := h.Call(t.Context(), args(t, "GET", srv.URL))
	if err != nil {
		t.Fatalf("Call error = %v", err)
	}
	if want := "\n\nxxxxxxxxxx\n[… at least "; !strings.Contains(got, want) {
		t.Errorf("Call = %q, want it to contain %q", got, want)
	}
}

func TestHTTPRequestErrors(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	slow, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})

	tests := []struct {
		name string
		args string
		want string
	}{
		{"not JSON", `{`, "arguments: "},
		{"bad method", `{"method":"BREW","url":"http://127.0.0.1/"}`, `method "BREW": want one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS`},
		{"not http", `{"method":"GET","url":"file:///etc/passwd"}`, "only http and https URLs are supported"},
		{"no host", `{"method":"GET","url":"http:///x"}`, "has no host"},
		{"connection refused", `{"method":"GET","url":"` + closed.URL + `"}`, "refused the connection (nothing listens there)"},
		{"timeout", `{"method":"GET","url":"` + slow.URL + `"}`, "did not answer in time"},
	}
	// Only the server that never answers meets the short timeout: a
	// refused connection, on a loaded machine, can take longer than it
	// to be told.
	h := tools.NewHTTPRequest(tools.HTTPOptions{Timeout: time.Minute})
	short := tools.NewHTTPRequest(tools.HTTPOptions{Timeout: 100 * time.Millisecond})
	for _, tt := range tests {
		h := h
		if tt.name == "timeout" {
			h = short
		}
		got, err := h.Call(t.Context(), json.RawMessage(tt.args))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Call(%s) = %q, %v; want an error containing %q", tt.args, got, err, tt.want)
		}
	}
}

func TestHTTPRequestIdempotent(t *testing.T) {
	t.Parallel()
	h := tools.NewHTTPRequest(tools.HTTPOptions{})
	tests := []struct {
		args string
		want bool
	}{
		{`{"method":"GET","url":"http://x/"}`, true},
		{`{"method":"get","url":"http://x/"}`, true},
		{`{"method":"HEAD","url":"http://x/"}`, true},
		{`{"method":"Head","url":"http://x/"}`, true},
		{`{"method":"POST","url":"http://x/"}`, false},
		{`{"method":"PUT","url":"http://x/"}`, false},
		{`{"method":"DELETE","url":"http://x/"}`, false},
		{`{"method":"OPTIONS","url":"http://x/"}`, false},
		{`{"url":"http://x/"}`, false},
		{`not json`, false},
	}
	for _, tt := range tests {
		if got := h.Idempotent(json.RawMessage(tt.args)); got != tt.want {
			t.Errorf("Idempotent(%s) = %v, want %v", tt.args, got, tt.want)
		}
	}
}

func TestHTTPRequestDescriptionNamesHosts(t *testing.T) {
	t.Parallel()
	h := tools.NewHTTPRequest(tools.HTTPOptions{AllowHosts: []string{"api.example.com", "127.0.0.1"}})
	if want := "Only these hosts may be called: api.example.com, 127.0.0.1."; !strings.Contains(h.Description(), want) {
		t.Errorf("Description() = %q, want it to contain %q", h.Description(), want)
	}
	if h.Name() != "http_request" {
		t.Errorf("Name() = %q, want http_request", h.Name())
	}
}

func TestCapText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 10, "abcdefghij\n[… 2 more bytes not shown]"},
		{"ééééé", 5, "éé\n[… 6 more bytes not shown]"}, // not cut inside a character
	}
	for _, tt := range tests {
		if got := tools.CapText(tt.text, tt.max); got != tt.want {
			t.Errorf("CapText(%q, %d) = %q, want %q", tt.text, tt.max, got, tt.want)
		}
	}
}

// A server that echoes the request's headers back, as many debugging
// endpoints do, does not show the call's credentials in its result: the
// card masked them, and the result reaches the thread and the model.
func TestHTTPRequestResultHidesEchoedCredentials(t *testing.T) {
	t.Parallel()
	const token, key, cookie = "sk-live-0123456789abcdef", "k3y-from-the-edit", "c00kie-0f-the-session"
	echo, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/next?key="+url.QueryEscape(r.Header.Get("X-Api-Key")))
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/cookies":
			cookies := map[string]string{}
			for _, c := range r.Cookies() {
				cookies[c.Name] = c.Value
			}
			json.NewEncoder(w).Encode(map[string]any{"cookies": cookies})
		case "/cut":
			// The body is cut within the key.
			fmt.Fprint(w, strings.Repeat(".", 60)+r.Header.Get("X-Api-Key"))
		default:
			b, _ := json.Marshal(map[string]any{"headers": r.Header, "query": url.QueryEscape(r.Header.Get("X-Api-Key"))})
			w.Write(b)
		}
	})
	whole, cut := tools.NewHTTPRequest(tools.HTTPOptions{}), tools.NewHTTPRequest(tools.HTTPOptions{MaxBody: 66})
	withCreds := func(m map[string]any) {
		m["headers"] = map[string]string{"Authorization": "Bearer " + token, "x-api-key": key, "Accept": "application/json",
			"Cookie": "theme=dark; session=" + cookie}
	}
	for path, h := range map[string]*tools.HTTPRequest{"/headers": whole, "/cookies": whole, "/cut": cut} {
		got, err := h.Call(t.Context(), args(t, "GET", echo.URL+path, withCreds))
		if err != nil {
			t.Fatalf("Call(%s) error = %v", path, err)
		}
		for _, secret := range []string{token, key, key[:6], url.QueryEscape(key), cookie} {
			if strings.Contains(got, secret) {
				t.Errorf("Call(%s) = %q; shows %q of the credentials", path, got, secret)
			}
		}
		if !strings.Contains(got, tools.Masked) {
			t.Errorf("Call(%s) = %q; want the credentials shown as %s", path, got, tools.Masked)
		}
	}
	// What is not a credential is shown as the server sent it.
	got, _ := whole.Call(t.Context(), args(t, "GET", echo.URL+"/headers", withCreds))
	if !strings.Contains(got, `"Accept":["application/json"]`) {
		t.Errorf("Call(/headers) = %q; want the Accept header echoed", got)
	}
}

// A redirect to another allowed host is followed without the call's
// credentials: the person approved them for the host the call names.
func TestHTTPRequestRedirectLeavesCredentialsOnTheirHost(t *testing.T) {
	t.Parallel()
	const token = "sk-live-0123456789abcdef"
	credHeaders := []string{"Authorization", "X-Api-Key", "X-Auth-Token", "Cookie", "Private-Token"}
	seen := make(chan http.Header, 10)
	target, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		fmt.Fprint(w, "arrived")
	})
	origin, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/here" {
			seen <- r.Header.Clone()
			fmt.Fprint(w, "stayed")
			return
		}
		if r.URL.Path == "/same" {
			http.Redirect(w, r, "/here", http.StatusFound)
			return
		}
		http.Redirect(w, r, target.URL+"/landing", http.StatusTemporaryRedirect)
	})
	h := tools.NewHTTPRequest(tools.HTTPOptions{AllowHosts: []string{hostPort(t, origin), hostPort(t, target)}})
	withCreds := func(m map[string]any) {
		hdr := map[string]string{"Accept": "text/plain"}
		for _, k := range credHeaders {
			hdr[k] = "Bearer " + token
		}
		m["headers"] = hdr
	}

	got, err := h.Call(t.Context(), args(t, "GET", origin.URL+"/away", withCreds))
	if err != nil {
		t.Fatalf("Call(%s/away) error = %v", origin.URL, err)
	}
	hdr := <-seen
	for _, k := range credHeaders {
		if v := hdr.Get(k); v != "" {
			t.Errorf("the other host got %s: %q; want no credential of the call", k, v)
		}
	}
	if hdr.Get("Accept") != "text/plain" {
		t.Errorf("the other host got Accept %q; want the call's other headers", hdr.Get("Accept"))
	}
	want := "Note: the redirect to " + hostPort(t, target) + " was sent without the headers Authorization, Cookie, Private-Token, X-Api-Key, X-Auth-Token, which were for " + hostPort(t, origin)
	if !strings.HasSuffix(got, "arrived") || !strings.Contains(got, want) {
		t.Errorf("Call(%s/away) = %q; want the page it redirects to, and %q", origin.URL, got, want)
	}

	// On the call's own host they follow.
	if _, err := h.Call(t.Context(), args(t, "GET", origin.URL+"/same", withCreds)); err != nil {
		t.Fatalf("Call(%s/same) error = %v", origin.URL, err)
	}
	hdr = <-seen
	for _, k := range credHeaders {
		if v := hdr.Get(k); v != "Bearer "+token {
			t.Errorf("a redirect on the same host got %s: %q; want the call's credential", k, v)
		}
	}
}

// Every request of the tool says it is the tool's, redirects included:
// the bot's own endpoints refuse them. A call cannot name the header.
func TestHTTPRequestMarksItsRequests(t *testing.T) {
	t.Parallel()
	seen := make(chan []string, 4)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Values(tools.ToolHeader)
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusFound)
		}
	})
	h := tools.NewHTTPRequest(tools.HTTPOptions{})
	for _, headers := range []map[string]string{{tools.ToolHeader: ""}, {strings.ToLower(tools.ToolHeader): "someone else"}} {
		if _, err := h.Call(t.Context(), args(t, "GET", srv.URL+"/old", func(m map[string]any) { m["headers"] = headers })); !errors.Is(err, tools.ErrHeaderNotSent) {
			t.Errorf("Call(%v) error = %v, want %v", headers, err, tools.ErrHeaderNotSent)
		}
	}
	for _, headers := range []map[string]string{nil, {"Accept": "text/plain"}} {
		if _, err := h.Call(t.Context(), args(t, "GET", srv.URL+"/old", func(m map[string]any) { m["headers"] = headers })); err != nil {
			t.Fatalf("Call(%v) error = %v", headers, err)
		}
		for _, path := range []string{"/old", "/new"} {
			if got := <-seen; len(got) != 1 || got[0] != tools.HTTPRequestName {
				t.Errorf("with headers %v, %s got %s: %q; want %q", headers, path, tools.ToolHeader, got, tools.HTTPRequestName)
			}
		}
	}
}

// A URL that reads as one thing and calls another is refused before any
// card, with the plain way to write it; a plain one is not.
func TestCheckURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url  string
		want string // "" for accepted
	}{
		{"https://api.example.com/v1?q=1", ""},
		{"http://127.0.0.1:3000/", ""},
		{"http://[::1]:3000/", ""},
		{"http://[2001:db8::1]/", ""},
		{"http://[fe80::1%25eth0]:8080/", ""},
		{"http://0.0.0.0/", ""},
		{"https://EXAMPLE.com./x", ""},
		{"https://xn--bcher-kva.example/", ""},
		{"https://bücher.example/", ""},
		{"https://1.2.3.4.example.com/", ""},
		{"http://2130706433:3000/", "the host 2130706433 is the IPv4 address 127.0.0.1 written another way: write it 127.0.0.1"},
		{"http://0x7f000001/", "is the IPv4 address 127.0.0.1 written another way"},
		{"http://0177.0.0.1/", "the host 0177.0.0.1 is the IPv4 address 127.0.0.1"},
		{"http://127.1/", "the host 127.1 is the IPv4 address 127.0.0.1"},
		{"http://0x7f.1/", "is the IPv4 address 127.0.0.1"},
		{"http://127.0.0.1./", "the host 127.0.0.1. is the IPv4 address 127.0.0.1"},
		{"http://127.000.000.001/", "is the IPv4 address 127.0.0.1"},
		{"http://2852039166/latest/meta-data/", "is the IPv4 address 169.254.169.254"},
		{"http://１２７．０．０．１:3000/", "is the IPv4 address 127.0.0.1"},
		{"http://256.0.0.1/", "the host 256.0.0.1 ends in a number but is not an IPv4 address"},
		{"http://example.123/", "ends in a number but is not an IPv4 address"},
		{"http://example.0x/", "ends in a number"},
		{"http://[::ffff:127.0.0.1]:3000/", "the host [::ffff:127.0.0.1] is the IPv4 address 127.0.0.1: write it 127.0.0.1"},
		{"http://[::ffff:7f00:1]/", "is the IPv4 address 127.0.0.1"},
		{"http://[0:0:0:0:0:ffff:a9fe:a9fe]/", "is the IPv4 address 169.254.169.254"},
		{"https://good.example@evil.example/", "has user information before its host"},
		{"https://admin:hunter2@api.example.com/", "has user information before its host"},
		{"https://b%C3%BCcher.example/", "is written with %-escapes: write it as it is called, bücher.example"},
		{"https://%65vil.example/", "invalid URL escape"},
		{"ftp://example.com/", "only http and https URLs are supported"},
		{"http:///x", "has no host"},
		{"http://[::%25\x81]/", "is not sent as it is written"},
	}
	for _, tt := range tests {
		u, err := tools.CheckURL(tt.url)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckURL(%q) error = %v, want none", tt.url, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("CheckURL(%q) = %v, %v; want an error containing %q", tt.url, u, err, tt.want)
		case tt.want != "" && strings.Contains(err.Error(), "hunter2"):
			t.Errorf("CheckURL(%q) error = %v; shows the password", tt.url, err)
		}
	}
	// The tool refuses them before calling anything, and before a card.
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {})
	port := strings.TrimPrefix(hostPort(t, srv), "127.0.0.1:")
	h := tools.NewHTTPRequest(tools.HTTPOptions{})
	for _, u := range []string{"http://2130706433:" + port + "/", "http://[::ffff:127.0.0.1]:" + port + "/", "http://u:p@127.0.0.1:" + port + "/"} {
		if err := h.Check(args(t, "GET", u)); !errors.Is(err, tools.ErrUnclearURL) {
			t.Errorf("Check(%s) = %v, want %v", u, err, tools.ErrUnclearURL)
		}
		if _, err := h.Call(t.Context(), args(t, "GET", u)); !errors.Is(err, tools.ErrUnclearURL) {
			t.Errorf("Call(%s) = %v, want %v", u, err, tools.ErrUnclearURL)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the server got %d requests, want none", n)
	}
}

// FuzzCheckURL: a URL CheckURL accepts has no user information, names
// its host as written, calls an IP address only as written plainly, and
// is sent as the host it was checked with.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:3000/", "http://2130706433/", "http://[::ffff:7f00:1]/", "https://a@b/",
		"http://b%C3%BCcher.example/", "http://１２７．０．０．１/", "http://0x7f.1/", "https://bücher.example/", "http://[fe80::1%25eth0]/",
		"http://example.0x/", "http://1.2.3.4./"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := tools.CheckURL(raw)
		if err != nil {
			return
		}
		if u.User != nil {
			t.Errorf("CheckURL(%q) accepted user information %q", raw, u.User)
		}
		if !strings.Contains(strings.ReplaceAll(raw, "%25", "%"), u.Hostname()) {
			t.Errorf("CheckURL(%q) accepted host %q, not as written", raw, u.Hostname())
		}
		// What the tool sends: the request's URL is u.String() parsed again.
		again, err := url.Parse(u.String())
		if err != nil || again.Host != u.Host {
			t.Errorf("CheckURL(%q): %q is sent as host %v (%v), want %q", raw, u.String(), again, err, u.Host)
		}
		// An address the resolver may read in a number is written plainly.
		host := u.Hostname()
		if ip, err := netip.ParseAddr(host); err == nil {
			if ip.Is4In6() {
				t.Errorf("CheckURL(%q) accepted the IPv4 address %s written as IPv6", raw, ip.Unmap())
			}
			return
		}
		// net/http dials a host that is not ASCII in its IDNA form.
		dialled := host
		if a, err := idna.Lookup.ToASCII(host); err == nil && strings.ContainsFunc(host, func(r rune) bool { return r >= utf8.RuneSelf }) {
			dialled = a
		}
		last := strings.TrimSuffix(dialled, ".")
		if last = last[strings.LastIndexByte(last, '.')+1:]; last != "" && strings.Trim(last, "0123456789") == "" {
			t.Errorf("CheckURL(%q) accepted host %q, dialled as %q, which ends in a number", raw, host, dialled)
		}
	})
}

// FuzzHTTPRequestHidesCredentials: whatever a server puts around a
// credential the call sent, and wherever the body is cut, the result
// shows none of it, nor its first MinSecretLen bytes or more at the cut.
func FuzzHTTPRequestHidesCredentials(f *testing.F) {
	f.Add("sk-live-0123456789", "you sent: ", " (thanks)", 20)
	f.Add("Bearer t0k3n-abc", "{\"Authorization\":\"", "\"}", 25)
	f.Add("a&b=c d", "?key=", "", 8)
	f.Fuzz(func(t *testing.T, secret, before, after string, maxBody int) {
		if len(secret) < tools.MinSecretLen || !utf8.ValidString(secret) || strings.ContainsAny(secret, "•\uFFFD\x00") ||
			strings.ContainsFunc(secret, func(r rune) bool { return r < 0x20 || r == 0x7f }) || maxBody < 1 || maxBody > 1<<12 {
			return
		}
		body := before + secret + after
		client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{"Content-Type": {"text/plain"}},
				Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
		})}
		h := tools.NewHTTPRequest(tools.HTTPOptions{Client: client, MaxBody: maxBody})
		a := args(t, "POST", "https://api.example.com/echo", func(m map[string]any) { m["headers"] = map[string]string{"X-Api-Key": secret} })
		got, err := h.Call(t.Context(), a)
		if err != nil {
			return // a value net/http does not send
		}
		_, shown, _ := strings.Cut(got, "\n\n")
		cut := moreNote.MatchString(shown)
		shown = moreNote.ReplaceAllString(shown, "")
		if strings.Contains(shown, secret) {
			t.Errorf("Call with X-Api-Key %q, body %q = %q; shows the key", secret, body, got)
		}
		if cut {
			for k := tools.MinSecretLen; k < len(secret); k++ {
				if strings.HasSuffix(shown, secret[:k]) {
					t.Errorf("Call with X-Api-Key %q, body %q = %q; ends with %q of the key", secret, body, got, secret[:k])
				}
			}
		}
	})
}

// moreNote is the note that ends a result cut short.
var moreNote = regexp.MustCompile(`\n\[… (at least )?\d+ more bytes not shown\]$`)

// Headers the request would not carry as the card shows them are refused
// before any card.
func TestHTTPRequestHeadersNotSentAsWritten(t *testing.T) {
	t.Parallel()
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {})
	h := tools.NewHTTPRequest(tools.HTTPOptions{})
	tests := []struct {
		headers map[string]string
		want    string
	}{
		{map[string]string{"X-Amz-Target": "Read", "x-amz-target": "DeleteEverything"}, `headers "X-Amz-Target" and "x-amz-target" are one header`},
		{map[string]string{"X-Note": "a\r\nX-Admin: true"}, "the value of header X-Note holds a control character"},
		{map[string]string{"X Admin": "true"}, `"X Admin" is not an HTTP header name`},
		{map[string]string{"Host": "admin.internal"}, "header Host is set from the URL and the body"},
		{map[string]string{"transfer-encoding": "chunked"}, "header transfer-encoding is set from the URL and the body"},
	}
	for _, tt := range tests {
		a := args(t, "POST", srv.URL, func(m map[string]any) { m["headers"] = tt.headers })
		if err := h.Check(a); !errors.Is(err, tools.ErrHeaderNotSent) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Check(%s) = %v; want %v containing %q", a, err, tools.ErrHeaderNotSent, tt.want)
		}
		if _, err := h.Call(t.Context(), a); !errors.Is(err, tools.ErrHeaderNotSent) {
			t.Errorf("Call(%s) = %v; want %v", a, err, tools.ErrHeaderNotSent)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the server got %d requests, want none", n)
	}
	if err := h.Check(args(t, "GET", srv.URL, func(m map[string]any) { m["headers"] = map[string]string{"Accept": "text/plain", "X-Api-Key": "k"} })); err != nil {
		t.Errorf("Check with plain headers = %v, want nil", err)
	}
}
