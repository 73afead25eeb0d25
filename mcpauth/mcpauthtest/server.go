// Package mcpauthtest is a stand-in for a remote MCP server behind OAuth,
// for tests: an authorization server (metadata, dynamic registration,
// authorization with PKCE, tokens and refresh) and a protected MCP
// endpoint whose tool whoami answers with the person the token belongs
// to. Tests play the person's browser: GET the authorization URL with the
// UserHeader naming who is logged in, and follow the redirect.
package mcpauthtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// UserHeader names the person logged in at the authorization server.
const UserHeader = "X-Test-User"

// Options shape the server.
type Options struct {
	// PublicDiscovery lets initialize and tools/list through without a
	// token; only tools/call needs one.
	PublicDiscovery bool
	// TokenTTL is how long an access token is valid (default an hour).
	TokenTTL time.Duration
	// Legacy lays the server out as the 2025-03-26 specification knew
	// it: no protected-resource metadata, a 401 without
	// resource_metadata, and the authorization server's metadata at the
	// root of the server's origin, its issuer and endpoints under the
	// path Legacy (e.g. "/oauth").
	Legacy string
	// Issuer and EndpointBase, when set, replace the issuer and the base
	// of the endpoints the authorization server's metadata names: a
	// server that claims to be another. An Issuer that starts with "/"
	// is a path under the server's own origin.
	Issuer, EndpointBase string
	// ResponseIss, when set, is the iss the authorization response
	// carries (RFC 9207), and the metadata says responses carry one.
	ResponseIss string
	// Assertions, when set, make the token endpoint take the JWT bearer
	// grant (RFC 7523) of enterprise-managed authorization: an identity
	// assertion grant Assertions knows, for this server's issuer and
	// resource, from the client Client (client_secret_basic).
	Assertions func(assertion string) (user, audience, resource string, ok bool)
	Client     [2]string
}

// Server is the stand-in. It is safe for concurrent use.
type Server struct {
	srv  *httptest.Server
	opts Options

	mu      sync.Mutex
	codes   map[string]grant
	access  map[string]grant // access token → grant
	refresh map[string]grant
	calls   map[string]int // whoami calls by user
	tokens  []string       // every token issued, access and refresh
}

type grant struct {
	user, challenge, resource, scope string
	expires                          time.Time
}

// New starts a Server, closed when the test ends.
func New(t testing.TB, opts Options) *Server {
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = time.Hour
	}
	s := &Server{opts: opts, codes: map[string]grant{}, access: map[string]grant{}, refresh: map[string]grant{}, calls: map[string]int{}}
	mux := http.NewServeMux()
	if opts.Legacy == "" {
		mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", s.resourceMeta)
	}
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", s.serverMeta)
	mux.HandleFunc("POST "+opts.Legacy+"/register", s.register)
	mux.HandleFunc("GET "+opts.Legacy+"/authorize", s.authorize)
	mux.HandleFunc("POST "+opts.Legacy+"/token", s.token)
	mux.Handle("/mcp", s.protect(sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server { return s.mcpServer(r) }, nil)))
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the MCP endpoint.
func (s *Server) URL() string { return s.srv.URL + "/mcp" }

// Calls is how often whoami ran as user.
func (s *Server) Calls(user string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[user]
}

// Tokens are every token the server issued.
func (s *Server) Tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tokens...)
}

// Revoke makes the server refuse every token of user, as a person who
// disconnects the app at the provider would.
func (s *Server) Revoke(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, g := range s.access {
		if g.user == user {
			delete(s.access, k)
		}
	}
	for k, g := range s.refresh {
		if g.user == user {
			delete(s.refresh, k)
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) resourceMeta(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, map[string]any{"resource": s.URL(), "authorization_servers": []string{s.srv.URL}, "scopes_supported": []string{"whoami"}})
}

// Issuer is the issuer the authorization server's metadata names.
func (s *Server) Issuer() string {
	if strings.HasPrefix(s.opts.Issuer, "/") {
		return s.srv.URL + s.opts.Issuer
	}
	if s.opts.Issuer != "" {
		return s.opts.Issuer
	}
	return s.srv.URL + s.opts.Legacy
}

func (s *Server) serverMeta(w http.ResponseWriter, _ *http.Request) {
	base := s.srv.URL + s.opts.Legacy
	if s.opts.EndpointBase != "" {
		base = s.opts.EndpointBase
	}
	meta := map[string]any{
		"issuer": s.Issuer(), "authorization_endpoint": base + "/authorize", "token_endpoint": base + "/token",
		"registration_endpoint": base + "/register", "response_types_supported": []string{"code"},
		"grant_types_supported": []string{"authorization_code", "refresh_token"}, "code_challenge_methods_supported": []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"none"}, "scopes_supported": []string{"whoami", "offline_access"},
	}
	if s.opts.ResponseIss != "" {
		meta["authorization_response_iss_parameter_supported"] = true
	}
	if s.opts.Assertions != nil {
		meta["grant_types_supported"] = []string{"urn:ietf:params:oauth:grant-type:jwt-bearer"}
		meta["token_endpoint_auth_methods_supported"] = []string{"client_secret_basic"}
	}
	writeJSON(w, 200, meta)
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var meta map[string]any
	_ = json.NewDecoder(r.Body).Decode(&meta)
	meta["client_id"] = "client-" + random()
	meta["token_endpoint_auth_method"] = "none"
	writeJSON(w, 201, meta)
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	user := r.Header.Get(UserHeader)
	if user == "" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("resource") != s.URL() {
		http.Error(w, "login, PKCE S256 and the resource are required", http.StatusBadRequest)
		return
	}
	code := "code-" + random()
	s.mu.Lock()
	s.codes[code] = grant{user: user, challenge: q.Get("code_challenge"), resource: q.Get("resource"), scope: q.Get("scope")}
	s.mu.Unlock()
	back, err := url.Parse(q.Get("redirect_uri"))
	if err != nil {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	bq := back.Query()
	bq.Set("code", code)
	bq.Set("state", q.Get("state"))
	if s.opts.ResponseIss != "" {
		bq.Set("iss", s.opts.ResponseIss)
	}
	back.RawQuery = bq.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	s.mu.Lock()
	defer s.mu.Unlock()
	var g grant
	switch r.Form.Get("grant_type") {
	case "authorization_code":
		c, ok := s.codes[r.Form.Get("code")]
		delete(s.codes, r.Form.Get("code"))
		sum := sha256.Sum256([]byte(r.Form.Get("code_verifier")))
		if !ok || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge || r.Form.Get("resource") != c.resource {
			writeJSON(w, 400, map[string]string{"error": "invalid_grant"})
			return
		}
		g = c
	case "refresh_token":
		c, ok := s.refresh[r.Form.Get("refresh_token")]
		if !ok {
			writeJSON(w, 400, map[string]string{"error": "invalid_grant"})
			return
		}
		g = c
	case "urn:ietf:params:oauth:grant-type:jwt-bearer":
		id, secret, basic := r.BasicAuth()
		if s.opts.Assertions == nil || !basic || id != s.opts.Client[0] || secret != s.opts.Client[1] {
			writeJSON(w, 401, map[string]string{"error": "invalid_client"})
			return
		}
		user, aud, res, ok := s.opts.Assertions(r.Form.Get("assertion"))
		if !ok || aud != s.Issuer() || res != s.URL() {
			writeJSON(w, 400, map[string]string{"error": "invalid_grant"})
			return
		}
		g = grant{user: user, resource: res, scope: r.Form.Get("scope")}
	default:
		writeJSON(w, 400, map[string]string{"error": "unsupported_grant_type"})
		return
	}
	g.expires = time.Now().Add(s.opts.TokenTTL)
	at, rt := "at-"+random(), "rt-"+random()
	s.access[at], s.refresh[rt] = g, g
	s.tokens = append(s.tokens, at, rt)
	writeJSON(w, 200, map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": int(s.opts.TokenTTL.Seconds()), "refresh_token": rt, "scope": g.scope})
}

// protect answers 401 with the resource metadata to a request without a
// valid token (but initialize and tools/list with PublicDiscovery).
func (s *Server) protect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(body, &msg)
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		s.mu.Lock()
		g, ok := s.access[tok]
		s.mu.Unlock()
		if ok && time.Now().Before(g.expires) {
			r.Header.Set(UserHeader, g.user)
			next.ServeHTTP(w, r)
			return
		}
		r.Header.Del(UserHeader)
		if s.opts.PublicDiscovery && msg.Method != "tools/call" {
			next.ServeHTTP(w, r)
			return
		}
		if s.opts.Legacy != "" {
			w.Header().Set("WWW-Authenticate", `Bearer scope="whoami"`)
		} else {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer resource_metadata="%s/.well-known/oauth-protected-resource/mcp", scope="whoami"`, s.srv.URL))
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
}

func (s *Server) mcpServer(*http.Request) *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "whoami", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "whoami", Description: "Says whose token the call carries.", InputSchema: json.RawMessage(`{"type":"object","properties":{"note":{"type":"string"}}}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			user := req.Extra.Header.Get(UserHeader)
			s.mu.Lock()
			s.calls[user]++
			s.mu.Unlock()
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "you are " + user}}}, nil
		})
	return srv
}

func random() string { return rand.Text() }
