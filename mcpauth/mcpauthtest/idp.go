package mcpauthtest

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
)

// IdP is a stand-in for an organisation's identity provider in
// enterprise-managed authorization (SEP-990): OpenID Connect sign-in (the
// authorization code with PKCE, for an ID token; the browser names who
// is logged in with UserHeader) and the token exchange (RFC 8693) of an
// ID token for an identity assertion grant (ID-JAG), which a Server with
// Options.Assertions = IdP.Assertion takes. Tokens are opaque strings,
// each ID-JAG good once.
type IdP struct {
	srv *httptest.Server

	mu        sync.Mutex
	issuer    string
	codes     map[string][2]string // code → user, challenge
	idTokens  map[string]string    // ID token → user
	jags      map[string][3]string // ID-JAG → user, audience, resource
	exchanges int
}

// NewIdP starts an IdP, closed when the test ends.
func NewIdP(t testing.TB) *IdP {
	p := &IdP{codes: map[string][2]string{}, idTokens: map[string]string{}, jags: map[string][3]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		iss := p.issuer
		p.mu.Unlock()
		if iss == "" {
			iss = p.srv.URL
		}
		writeJSON(w, 200, map[string]any{"issuer": iss, "authorization_endpoint": p.srv.URL + "/authorize", "token_endpoint": p.srv.URL + "/token",
			"response_types_supported": []string{"code"}, "code_challenge_methods_supported": []string{"S256"},
			"grant_types_supported": []string{"authorization_code", "urn:ietf:params:oauth:grant-type:token-exchange"}})
	})
	mux.HandleFunc("GET /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// SetIssuer makes the metadata name issuer instead of the IdP's URL: an
// identity provider that claims to be another.
func (p *IdP) SetIssuer(issuer string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.issuer = issuer
}

// URL is the IdP's issuer.
func (p *IdP) URL() string { return p.srv.URL }

// IDToken is a new ID token of user, as their sign-in would give it.
func (p *IdP) IDToken(user string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	tok := "idt-" + random()
	p.idTokens[tok] = user
	return tok
}

// Exchanges is how many token exchanges the IdP granted.
func (p *IdP) Exchanges() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exchanges
}

// Assertion checks an ID-JAG, once: whose it is, for which authorization
// server and resource.
func (p *IdP) Assertion(jag string) (user, audience, resource string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g, ok := p.jags[jag]
	delete(p.jags, jag)
	return g[0], g[1], g[2], ok
}

func (p *IdP) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	user := r.Header.Get(UserHeader)
	if user == "" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
		http.Error(w, "login and PKCE S256 are required", http.StatusBadRequest)
		return
	}
	code := "idp-code-" + random()
	p.mu.Lock()
	p.codes[code] = [2]string{user, q.Get("code_challenge")}
	p.mu.Unlock()
	back, err := url.Parse(q.Get("redirect_uri"))
	if err != nil {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	bq := back.Query()
	bq.Set("code", code)
	bq.Set("state", q.Get("state"))
	back.RawQuery = bq.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func (p *IdP) token(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch r.Form.Get("grant_type") {
	case "authorization_code":
		c, ok := p.codes[r.Form.Get("code")]
		delete(p.codes, r.Form.Get("code"))
		sum := sha256.Sum256([]byte(r.Form.Get("code_verifier")))
		if !ok || base64.RawURLEncoding.EncodeToString(sum[:]) != c[1] {
			writeJSON(w, 400, map[string]string{"error": "invalid_grant"})
			return
		}
		tok := "idt-" + random()
		p.idTokens[tok] = c[0]
		writeJSON(w, 200, map[string]any{"access_token": "idp-at-" + random(), "token_type": "Bearer", "expires_in": 3600, "id_token": tok})
	case "urn:ietf:params:oauth:grant-type:token-exchange":
		user, ok := p.idTokens[r.Form.Get("subject_token")]
		if !ok || r.Form.Get("subject_token_type") != "urn:ietf:params:oauth:token-type:id_token" ||
			r.Form.Get("requested_token_type") != "urn:ietf:params:oauth:token-type:id-jag" || r.Form.Get("audience") == "" || r.Form.Get("resource") == "" {
			writeJSON(w, 400, map[string]string{"error": "invalid_grant"})
			return
		}
		jag := "jag-" + random()
		p.jags[jag] = [3]string{user, r.Form.Get("audience"), r.Form.Get("resource")}
		p.exchanges++
		writeJSON(w, 200, map[string]any{"access_token": jag, "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag", "token_type": "N_A", "expires_in": 300})
	default:
		writeJSON(w, 400, map[string]string{"error": "unsupported_grant_type"})
	}
}
