package mcpauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/sirupsen/logrus"
	"golang.org/x/oauth2"

	"github.com/countersign/countersign/tools"
)

// A call that waits for its requester to connect is a pause of its run,
// not a goroutine, when the run can pause (tools.CallInfo.CanPause) and a
// Waker is set: the authorization request is saved with what completing
// it needs — a PKCE verifier of its own (the SDK's stays in its memory),
// the token endpoint, the client and the redirect — sealed under the
// token key like a connection, and the call returns a
// *tools.ConnectRequiredError at once (nothing is sent). The callback, on
// any replica, exchanges the code itself, saves the connection and wakes
// the call's thread (Waker), which sends the call again, once, with the
// person's token. Without a Waker, or when the token endpoint cannot be
// found before asking, the call waits for the callback in memory.

// Waiting is the call a connection request was made for.
type Waiting struct {
	Identity Identity
	Thread   string
	Call     string
	// Round is the call's attempt that asked.
	Round int
}

// Waker wakes the thread of a call that waited for a connection, once
// it is made. runner.Service (through the wiring) is one; it must be safe
// for concurrent use.
type Waker interface {
	Connected(ctx context.Context, w Waiting) error
}

// WakerFunc is a Waker of a function.
type WakerFunc func(ctx context.Context, w Waiting) error

// Connected calls f.
func (f WakerFunc) Connected(ctx context.Context, w Waiting) error { return f(ctx, w) }

// wakers holds the Broker's Waker.
type wakers struct{ w atomic.Pointer[Waker] }

// SetWaker sets who wakes a thread whose call waited for a connection.
// It may be called at any time, typically once by the wiring.
func (b *Broker) SetWaker(w Waker) { b.waker.w.Store(&w) }

func (b *Broker) wakerOf() Waker {
	if w := b.waker.w.Load(); w != nil {
		return *w
	}
	return nil
}

// pausedRequest is what completing a paused connection request needs,
// sealed in its authState.
type pausedRequest struct {
	Verifier     string `json:"verifier"`
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret,omitempty"`
	AuthURL      string `json:"auth_url"`
	TokenURL     string `json:"token_url"`
	AuthStyle    int    `json:"auth_style,omitempty"`
	RedirectURL  string `json:"redirect_url"`
	Resource     string `json:"resource,omitempty"`
	// Issuer is the authorization server's; IssRequired says its
	// redirect must name it (RFC 9207).
	Issuer      string   `json:"issuer,omitempty"`
	IssRequired bool     `json:"iss_required,omitempty"`
	Scopes      []string `json:"scopes,omitempty"`
	Thread      string   `json:"thread"`
	Call        string   `json:"call"`
	Round       int      `json:"round"`
}

// pause saves the authorization request at authURL as a paused one and
// asks the person to connect; it returns a *tools.ConnectRequiredError,
// or an error when the request cannot be paused (the caller then waits
// in memory).
func (h *handler) pause(ctx context.Context, authURL string) error {
	u, err := url.Parse(authURL)
	if err != nil {
		return fmt.Errorf("authorization URL: %w", err)
	}
	q := u.Query()
	state := q.Get("state")
	p := pausedRequest{
		Verifier: oauth2.GenerateVerifier(), ClientID: q.Get("client_id"), RedirectURL: q.Get("redirect_uri"),
		Resource: q.Get("resource"), Scopes: strings.Fields(q.Get("scope")),
		Thread: h.call.Thread, Call: h.call.Call, Round: h.call.Attempt,
	}
	if p.ClientID == h.client.ClientID {
		p.ClientSecret = h.client.ClientSecret
	}
	p.AuthStyle = int(oauth2.AuthStyleInParams)
	if p.ClientSecret != "" {
		p.AuthStyle = int(oauth2.AuthStyleAutoDetect)
	}
	endpoint := *u
	endpoint.RawQuery = ""
	p.AuthURL = endpoint.String()
	asm, err := h.b.authServer(ctx, p.Resource, &endpoint)
	if err != nil {
		return err
	}
	p.TokenURL, p.Issuer, p.IssRequired = asm.TokenEndpoint, asm.Issuer, asm.AuthorizationResponseIssParameterSupported
	// The person opens a URL whose challenge is of this verifier.
	q.Set("code_challenge", oauth2.S256ChallengeFromVerifier(p.Verifier))
	q.Set("code_challenge_method", "S256")
	u.RawQuery = q.Encode()

	plain, _ := json.Marshal(p)
	sealed, err := h.b.seal.seal(h.id, plain)
	if err != nil {
		return err
	}
	expires := h.b.opts.Now().Add(h.b.opts.StateTTL)
	rec, _ := json.Marshal(authState{Identity: h.id, Expires: expires, Paused: sealed})
	if err := h.b.store.PutAuthState(ctx, state, rec, h.b.opts.StateTTL); err != nil {
		return fmt.Errorf("store connection request: %w", err)
	}
	if err := h.prompter.PromptConnect(ctx, Prompt{Identity: h.id, URL: u.String(), Expires: expires, Call: h.call}); err != nil {
		return fmt.Errorf("ask %s to connect: %w", h.id, err)
	}
	h.b.log.WithFields(logrus.Fields{"identity": h.id.String(), "thread": h.call.Thread, "call": h.call.Call}).Info("asked to connect to an MCP server; the call waits, paused")
	return &tools.ConnectRequiredError{Server: h.id.Server, User: h.id.User, Expires: expires}
}

// errNoTokenEndpoint: the token endpoint of a request could not be found.
var errNoTokenEndpoint = errors.New("no token endpoint found")

// authServer finds the metadata of the authorization server of resource
// (its protected-resource metadata, then the server's), or of the server
// at endpoint's origin, whose authorization endpoint is endpoint.
func (b *Broker) authServer(ctx context.Context, resource string, endpoint *url.URL) (*oauthex.AuthServerMeta, error) {
	var issuers []string
	if r, err := url.Parse(resource); err == nil && resource != "" {
		for _, path := range []string{"/.well-known/oauth-protected-resource" + strings.TrimSuffix(r.Path, "/"), "/.well-known/oauth-protected-resource"} {
			meta := *r
			meta.Path, meta.RawQuery = path, ""
			prm, err := oauthex.GetProtectedResourceMetadata(ctx, meta.String(), resource, b.opts.HTTPClient)
			if err == nil && prm != nil && len(prm.AuthorizationServers) > 0 {
				issuers = append(issuers, prm.AuthorizationServers[0])
				break
			}
		}
	}
	issuers = append(issuers, endpoint.Scheme+"://"+endpoint.Host)
	for _, iss := range issuers {
		asm, err := auth.GetAuthServerMetadata(ctx, iss, b.opts.HTTPClient)
		if err == nil && asm != nil && asm.TokenEndpoint != "" && asm.AuthorizationEndpoint == endpoint.String() {
			return asm, nil
		}
	}
	return nil, errNoTokenEndpoint
}

// completePaused exchanges the code of a paused request for a token with
// the request's verifier, saves the connection and wakes the call's
// thread.
func (b *Broker) completePaused(ctx context.Context, st authState, res callbackResult) error {
	plain, err := b.seal.open(st.Identity, st.Paused)
	if err != nil {
		return fmt.Errorf("connection request %s: %w", st.Identity, err)
	}
	var p pausedRequest
	if err := json.Unmarshal(plain, &p); err != nil {
		return fmt.Errorf("connection request %s: %w", st.Identity, err)
	}
	if res.Error != "" {
		return fmt.Errorf("%w (%s)", ErrDenied, oneLine(res.Error))
	}
	// The redirect names the server that issued the code, where it can
	// (RFC 9207): a code from another server is not exchanged.
	if (res.Iss != "" && res.Iss != p.Issuer) || (res.Iss == "" && p.IssRequired) {
		return fmt.Errorf("%w (the redirect does not name the authorization server asked)", ErrDenied)
	}
	cfg := &oauth2.Config{ClientID: p.ClientID, ClientSecret: p.ClientSecret, RedirectURL: p.RedirectURL, Scopes: p.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: p.AuthURL, TokenURL: p.TokenURL, AuthStyle: oauth2.AuthStyle(p.AuthStyle)}}
	opts := []oauth2.AuthCodeOption{oauth2.VerifierOption(p.Verifier)}
	if p.Resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", p.Resource))
	}
	hc := b.opts.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	tok, err := cfg.Exchange(context.WithValue(ctx, oauth2.HTTPClient, hc), res.Code, opts...)
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return fmt.Errorf("%w (%s)", ErrDenied, oneLine(re.ErrorCode))
		}
		return fmt.Errorf("token exchange %s: %w", st.Identity, errExchange)
	}
	c := &connection{AccessToken: tok.AccessToken, TokenType: tok.TokenType, RefreshToken: tok.RefreshToken, Expiry: tok.Expiry,
		ClientID: p.ClientID, ClientSecret: p.ClientSecret, AuthURL: p.AuthURL, TokenURL: p.TokenURL, AuthStyle: p.AuthStyle,
		Scopes: p.Scopes, Connected: b.opts.Now()}
	if err := b.save(ctx, st.Identity, c); err != nil {
		return err
	}
	w := b.wakerOf()
	if w == nil || p.Thread == "" {
		return nil
	}
	if err := w.Connected(ctx, Waiting{Identity: st.Identity, Thread: p.Thread, Call: p.Call, Round: p.Round}); err != nil {
		// The connection is made; the call's thread is told when it is
		// next looked at, or its request expires.
		b.log.WithFields(logrus.Fields{"identity": st.Identity.String(), "thread": p.Thread, "call": p.Call}).WithError(err).Warn("waking the call that waited for a connection")
	}
	return nil
}

// errExchange hides the token endpoint's error text, which may echo what
// was sent.
var errExchange = errors.New("the token endpoint did not answer with a token")
