// Package mcpauth keeps the OAuth connections of remote MCP servers: whose
// token a call to a server runs with, how a person (or the bot itself)
// connects, and where the tokens are kept.
//
// The flow itself — protected-resource metadata discovery (the
// WWW-Authenticate resource_metadata parameter, then the well-known
// URLs), authorization-server metadata (RFC 8414, OpenID Connect and the
// 2025-03-26 fallbacks), client ID metadata documents, pre-registered
// clients and dynamic registration, PKCE (S256), token endpoint
// authentication (none, client_secret_basic, client_secret_post), scope
// selection and step-up on insufficient_scope, offline_access and
// resource indicators (RFC 8707) — is the MCP Go SDK's
// (auth.AuthorizationCodeHandler, extauth.ClientCredentialsHandler) on
// golang.org/x/oauth2. This package gives it what the bot adds:
//
//   - An identity is a server and a person (a Slack user ID), or the bot
//     itself (Service). Its connection — the token and what refreshing it
//     needs — is sealed with AES-256-GCM under MCP_TOKEN_KEY, the identity
//     as additional data, and kept in the Store. A refreshed token is
//     sealed and saved again.
//   - A person without a connection is asked through the Prompter (in
//     Slack: an ephemeral message with a Connect button). The state of the
//     authorization request is kept in the Store, bound to the person and
//     the server, single use, expiring (Options.StateTTL); the
//     authorization server's redirect to the bot's /oauth/callback, on any
//     replica, takes the state (Complete) and delivers the code through the
//     Store's mailbox to the process whose call waits, which exchanges it
//     with its PKCE verifier. The verifier never leaves that process. When
//     the call's run can pause instead (pause.go), the request is saved
//     with a verifier of its own, sealed like a token, and the callback's
//     replica exchanges the code itself and wakes the call's thread.
//   - A 2025-03-26 server (no protected-resource metadata) whose metadata
//     at the root of its origin names an issuer under that origin, which
//     the SDK refuses (RFC 8414 §3.3), is authorized here on
//     golang.org/x/oauth2, with every issuer and endpoint held to the
//     server's own origin (legacy.go).
//   - A server whose oauth: names an identity_provider is reached with
//     enterprise-managed authorization (SEP-990, enterprise.go): the
//     person's ID token from their sign-in there, exchanged for an
//     identity assertion grant (RFC 8693), exchanged for the server's
//     token (RFC 7523).
//   - Nothing here logs, returns or renders a token: errors say which
//     identity and why, never what.
//
// The package does not decide who may use which identity: the MCP client
// (tools/mcp) asks for the requester's identity, and only theirs.
package mcpauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/sirupsen/logrus"
	"golang.org/x/oauth2"

	"github.com/countersign/countersign/tools"
)

// Service is the user of the bot's own identity at a server (auth:
// service): a connection an admin makes with `bot mcp connect SERVER`.
const Service = "@service"

// Identity is whose token a request carries: a person at a server, or the
// bot (User == Service).
type Identity struct {
	Server string `json:"server"`
	User   string `json:"user"`
}

func (id Identity) aad() []byte { return []byte("mcp-token\x00" + id.Server + "\x00" + id.User) }

// String is the identity as logs and the audit trail show it: "service"
// or the person's ID.
func (id Identity) String() string {
	if id.User == Service {
		return id.Server + ":service"
	}
	return id.Server + ":" + id.User
}

// Errors of connections.
var (
	// ErrNotConnected: the identity has no connection and nobody can be
	// asked to make one.
	ErrNotConnected = errors.New("not connected")
	// ErrNoState: the authorization request is unknown, used or expired.
	ErrNoState = errors.New("the connection request is unknown, used already, or expired")
	// ErrDenied: the person or the authorization server refused.
	ErrDenied = errors.New("the authorization server refused the connection")
)

// Store keeps sealed connections and pending authorization requests. The
// values are opaque bytes; keys are the identity and the request's state.
// *redisstore.Store is a Store; several processes may use one Store.
type Store interface {
	PutConnection(ctx context.Context, server, user string, sealed []byte) error
	// Connection returns nil, nil when there is none.
	Connection(ctx context.Context, server, user string) ([]byte, error)
	DeleteConnection(ctx context.Context, server, user string) (bool, error)
	// Connections lists the identities with a connection, of every
	// server when server is empty.
	Connections(ctx context.Context, server string) ([]Identity, error)
	PutAuthState(ctx context.Context, state string, rec []byte, ttl time.Duration) error
	// TakeAuthState returns and deletes the request: the first caller
	// gets it, nil, nil for every other.
	TakeAuthState(ctx context.Context, state string) ([]byte, error)
	// Deliver and Receive carry the code from the callback to the waiting
	// process (see handlers.Mailbox).
	Deliver(ctx context.Context, box string, value []byte, ttl time.Duration) error
	Receive(ctx context.Context, box string) ([]byte, error)
}

// Prompt asks a person to connect: open URL in a browser.
type Prompt struct {
	Identity Identity
	// URL is the authorization URL. It holds no secret (PKCE keeps the
	// verifier here), but is shown only to the person it is for.
	URL string
	// Expires is when the request stops being accepted.
	Expires time.Time
	// Call is the call that waits for the connection (zero for `bot mcp
	// connect`).
	Call tools.CallInfo
}

// Prompter shows a Prompt to the person it is for, and only them.
// Implementations must be safe for concurrent use.
type Prompter interface {
	PromptConnect(ctx context.Context, p Prompt) error
}

// PrompterFunc is a Prompter of a function.
type PrompterFunc func(ctx context.Context, p Prompt) error

// PromptConnect calls f.
func (f PrompterFunc) PromptConnect(ctx context.Context, p Prompt) error { return f(ctx, p) }

// Options are a Broker's optional settings.
type Options struct {
	// RedirectURL is the bot's callback, e.g.
	// https://bot.example.com/oauth/callback. Required for the
	// authorization code grant.
	RedirectURL string
	// HTTPClient makes the requests to the authorization servers
	// (default http.DefaultClient).
	HTTPClient *http.Client
	// StateTTL bounds how long an authorization request is accepted
	// (default 10 minutes).
	StateTTL time.Duration
	// ClientName is the name the bot registers with (default
	// "Countersign").
	ClientName string
	// IDToken, when set, gives the ID token of a person at the identity
	// provider of a server with oauth: identity_provider, instead of
	// their sign-in there through the Prompter.
	IDToken func(ctx context.Context, id Identity) (string, error)
	Logger  logrus.FieldLogger
	Now     func() time.Time
}

// Broker makes and keeps connections. It is safe for concurrent use.
type Broker struct {
	store Store
	seal  *sealer
	opts  Options
	log   logrus.FieldLogger
	waker wakers
}

// New returns a Broker that keeps connections in store, sealed with key
// (32 bytes; see KeyFromEnv).
func New(store Store, key []byte, opts Options) (*Broker, error) {
	s, err := newSealer(key)
	if err != nil {
		return nil, err
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = http.DefaultClient
	}
	if opts.StateTTL <= 0 {
		opts.StateTTL = 10 * time.Minute
	}
	if opts.ClientName == "" {
		opts.ClientName = "Countersign"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.Out = io.Discard
		opts.Logger = l
	}
	return &Broker{store: store, seal: s, opts: opts, log: opts.Logger}, nil
}

// RedirectURL is the callback the authorization servers redirect to.
func (b *Broker) RedirectURL() string { return b.opts.RedirectURL }

// connection is what is sealed for an identity: the token and what
// refreshing it needs.
type connection struct {
	AccessToken  string    `json:"access_token"`
	TokenType    string    `json:"token_type,omitempty"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	ClientID     string    `json:"client_id"`
	ClientSecret string    `json:"client_secret,omitempty"`
	AuthURL      string    `json:"auth_url,omitempty"`
	TokenURL     string    `json:"token_url"`
	AuthStyle    int       `json:"auth_style,omitempty"`
	Scopes       []string  `json:"scopes,omitempty"`
	Connected    time.Time `json:"connected"`
}

func (c *connection) token() *oauth2.Token {
	return &oauth2.Token{AccessToken: c.AccessToken, TokenType: c.TokenType, RefreshToken: c.RefreshToken, Expiry: c.Expiry}
}

func (c *connection) config() *oauth2.Config {
	return &oauth2.Config{
		ClientID: c.ClientID, ClientSecret: c.ClientSecret, Scopes: c.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: c.AuthURL, TokenURL: c.TokenURL, AuthStyle: oauth2.AuthStyle(c.AuthStyle)},
	}
}

// Connection is what may be shown of a connection: never its token.
type Connection struct {
	Identity
	Connected time.Time
	Expiry    time.Time
	Scopes    []string
	// Refreshable says whether the token can be renewed without the
	// person.
	Refreshable bool
}

func (b *Broker) load(ctx context.Context, id Identity) (*connection, error) {
	sealed, err := b.store.Connection(ctx, id.Server, id.User)
	if err != nil || sealed == nil {
		return nil, err
	}
	plain, err := b.seal.open(id, sealed)
	if err != nil {
		return nil, fmt.Errorf("connection %s: %w", id, err)
	}
	var c connection
	if err := json.Unmarshal(plain, &c); err != nil {
		return nil, fmt.Errorf("connection %s: %w", id, err)
	}
	return &c, nil
}

func (b *Broker) save(ctx context.Context, id Identity, c *connection) error {
	plain, err := json.Marshal(c)
	if err != nil {
		return err
	}
	sealed, err := b.seal.seal(id, plain)
	if err != nil {
		return err
	}
	if err := b.store.PutConnection(ctx, id.Server, id.User, sealed); err != nil {
		return fmt.Errorf("save connection %s: %w", id, err)
	}
	return nil
}

// Connections lists the connections of server (every server when empty),
// and of user only when user is not empty.
func (b *Broker) Connections(ctx context.Context, server, user string) ([]Connection, error) {
	ids, err := b.store.Connections(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("list connections: %w", err)
	}
	var out []Connection
	for _, id := range ids {
		if user != "" && id.User != user {
			continue
		}
		c, err := b.load(ctx, id)
		if err != nil {
			// A connection sealed with another key is listed, so that
			// it can be revoked.
			out = append(out, Connection{Identity: id})
			continue
		}
		if c == nil {
			continue
		}
		out = append(out, Connection{Identity: id, Connected: c.Connected, Expiry: c.Expiry, Scopes: c.Scopes, Refreshable: c.RefreshToken != ""})
	}
	return out, nil
}

// Connected reports whether the identity has a connection that opens
// with this key and can still give a token without the person: one whose
// token expired and cannot be renewed (an enterprise-managed one) is not.
func (b *Broker) Connected(ctx context.Context, id Identity) (bool, error) {
	c, err := b.load(ctx, id)
	if errors.Is(err, ErrOpen) {
		return false, nil
	}
	if c != nil && c.RefreshToken == "" && !c.Expiry.IsZero() && !b.opts.Now().Before(c.Expiry) {
		return false, err
	}
	return c != nil, err
}

// Revoke deletes a connection. It reports whether there was one.
func (b *Broker) Revoke(ctx context.Context, id Identity) (bool, error) {
	ok, err := b.store.DeleteConnection(ctx, id.Server, id.User)
	if err != nil {
		return false, fmt.Errorf("revoke %s: %w", id, err)
	}
	if ok {
		b.log.WithField("identity", id.String()).Info("MCP connection revoked")
	}
	return ok, nil
}

// authState is an authorization request waiting for its callback.
type authState struct {
	Identity Identity  `json:"identity"`
	Expires  time.Time `json:"expires"`
	// Paused, sealed, completes a request whose call paused (pause.go).
	Paused []byte `json:"paused,omitempty"`
}

// callbackResult is what the callback delivers to the waiting process.
type callbackResult struct {
	Code  string `json:"code,omitempty"`
	State string `json:"state"`
	Iss   string `json:"iss,omitempty"`
	Error string `json:"error,omitempty"`
}

func box(state string) string { return "mcpauth:" + state }

// Complete takes the authorization server's redirect to the callback (its
// query) and hands the code to the process that waits for it. The state
// is used once: a second redirect with it, or one after it expired, gets
// ErrNoState. It returns whose connection it completes.
func (b *Broker) Complete(ctx context.Context, query url.Values) (Identity, error) {
	state := query.Get("state")
	if state == "" || len(state) > 512 {
		return Identity{}, ErrNoState
	}
	raw, err := b.store.TakeAuthState(ctx, state)
	if err != nil {
		return Identity{}, fmt.Errorf("take connection request: %w", err)
	}
	if raw == nil {
		return Identity{}, ErrNoState
	}
	var st authState
	if err := json.Unmarshal(raw, &st); err != nil || b.opts.Now().After(st.Expires) {
		return Identity{}, ErrNoState
	}
	res := callbackResult{Code: query.Get("code"), State: state, Iss: query.Get("iss")}
	if e := query.Get("error"); e != "" || res.Code == "" {
		res.Code, res.Error = "", cmp(e, "no code")
	}
	if st.Paused != nil {
		return st.Identity, b.completePaused(ctx, st, res)
	}
	data, _ := json.Marshal(res)
	if err := b.store.Deliver(ctx, box(state), data, b.opts.StateTTL); err != nil {
		return Identity{}, fmt.Errorf("deliver authorization code: %w", err)
	}
	if res.Error != "" {
		return st.Identity, fmt.Errorf("%w (%s)", ErrDenied, oneLine(res.Error))
	}
	return st.Identity, nil
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}

// Handler returns the OAuth handler of one identity at one server, for
// the SDK's streamable transport: it sends the identity's token, renews
// it, and on a 401 (or a 403 insufficient_scope) authorizes again — by
// asking the person through prompter, or, with a nil prompter, by
// failing with ErrNotConnected. call is the call that waits, for the
// prompt.
func (b *Broker) Handler(cfg tools.MCPServer, user string, prompter Prompter, call tools.CallInfo) (auth.OAuthHandler, error) {
	id := Identity{Server: cfg.Name, User: user}
	if cfg.OAuth.IdentityProvider != nil {
		return b.idjagHandler(cfg, id, prompter, call)
	}
	if cfg.OAuth.Grant == tools.GrantClientCredentials && cfg.OAuth.PrivateKey != "" {
		key, alg, err := parsePrivateKey(cfg.OAuth.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("MCP server %q: oauth: private_key: %w", cfg.Name, err)
		}
		return &jwtHandler{clientID: cfg.OAuth.ClientID, key: key, alg: alg, scopes: cfg.OAuth.Scopes, hc: b.opts.HTTPClient, now: b.opts.Now}, nil
	}
	if cfg.OAuth.Grant == tools.GrantClientCredentials {
		return extauth.NewClientCredentialsHandler(&extauth.ClientCredentialsHandlerConfig{
			Credentials: &oauthex.ClientCredentials{ClientID: cfg.OAuth.ClientID, ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: cfg.OAuth.ClientSecret}},
			HTTPClient:  b.opts.HTTPClient,
		})
	}
	h := &handler{b: b, id: id, prompter: prompter, call: call, client: oauth2.Config{ClientID: cfg.OAuth.ClientID, ClientSecret: cfg.OAuth.ClientSecret}}
	c, err := b.load(context.Background(), id)
	if err != nil && !errors.Is(err, ErrOpen) {
		return nil, err
	}
	if errors.Is(err, ErrOpen) {
		b.log.WithField("identity", id.String()).Warn("MCP connection sealed with another key; asking to connect again")
		c = nil
	}
	hc := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:              b.opts.RedirectURL,
		AuthorizationCodeFetcher: h.fetch,
		Client:                   b.opts.HTTPClient,
		RequestRefreshToken:      true,
		NewTokenSource:           h.newTokenSource,
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs:            []string{b.opts.RedirectURL},
			ClientName:              b.opts.ClientName,
			GrantTypes:              []string{"authorization_code", "refresh_token"},
			ResponseTypes:           []string{"code"},
			TokenEndpointAuthMethod: "none",
		}},
	}
	if cfg.OAuth.ClientMetadataURL != "" {
		hc.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: cfg.OAuth.ClientMetadataURL}
	}
	if cfg.OAuth.ClientID != "" {
		pre := &oauthex.ClientCredentials{ClientID: cfg.OAuth.ClientID}
		if cfg.OAuth.ClientSecret != "" {
			pre.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: cfg.OAuth.ClientSecret}
		}
		hc.PreregisteredClient = pre
		hc.DynamicClientRegistrationConfig = nil
	}
	if len(cfg.OAuth.Scopes) > 0 {
		scopes := cfg.OAuth.Scopes
		hc.ScopeFilter = func([]string) []string { return scopes }
	}
	if c != nil {
		ctx := context.WithValue(context.Background(), oauth2.HTTPClient, b.opts.HTTPClient)
		hc.InitialTokenSource = h.persisting(c, c.config().TokenSource(ctx, c.token()))
	}
	inner, err := auth.NewAuthorizationCodeHandler(hc)
	if err != nil {
		return nil, fmt.Errorf("MCP server %q: oauth: %w", cfg.Name, err)
	}
	h.inner, h.config, h.scopes = inner, hc, cfg.OAuth.Scopes
	return h, nil
}

// handler is one identity's auth.OAuthHandler.
type handler struct {
	b        *Broker
	id       Identity
	prompter Prompter
	call     tools.CallInfo
	inner    *auth.AuthorizationCodeHandler
	config   *auth.AuthorizationCodeHandlerConfig
	scopes   []string
	// client is the pre-registered client, if any (pause.go).
	client oauth2.Config

	mu sync.Mutex
	// legacy is the token source of a connection made with 2025-03-26
	// metadata (see legacy.go), which the SDK's handler does not make.
	legacy oauth2.TokenSource
}

func (h *handler) TokenSource(ctx context.Context) (oauth2.TokenSource, error) {
	h.mu.Lock()
	ts := h.legacy
	h.mu.Unlock()
	if ts != nil {
		return ts, nil
	}
	return h.inner.TokenSource(ctx)
}

func (h *handler) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	header := resp.Header.Clone()
	err := h.inner.Authorize(ctx, req, resp)
	if err != nil {
		if handled, lerr := h.authorizeLegacy(ctx, req.URL, header); handled {
			err = lerr
		}
	} else {
		h.mu.Lock()
		h.legacy = nil
		h.mu.Unlock()
	}
	if err != nil {
		h.b.log.WithFields(logrus.Fields{"identity": h.id.String(), "status": resp.StatusCode, "error": err.Error()}).Info("MCP authorization did not complete")
	}
	return err
}

// fetch asks the person to open the authorization URL and waits for the
// code the callback delivers, on whichever replica.
func (h *handler) fetch(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	if h.prompter == nil {
		return nil, fmt.Errorf("%s: %w", h.id, ErrNotConnected)
	}
	if h.call.CanPause && h.call.Thread != "" && h.b.wakerOf() != nil {
		err := h.pause(ctx, args.URL)
		var paused *tools.ConnectRequiredError
		if errors.As(err, &paused) {
			return nil, err
		}
		h.b.log.WithField("identity", h.id.String()).WithError(err).Info("the connection request cannot pause the call; it waits for the callback")
	}
	u, err := url.Parse(args.URL)
	if err != nil {
		return nil, fmt.Errorf("authorization URL: %w", err)
	}
	state := u.Query().Get("state")
	expires := h.b.opts.Now().Add(h.b.opts.StateTTL)
	rec, _ := json.Marshal(authState{Identity: h.id, Expires: expires})
	if err := h.b.store.PutAuthState(ctx, state, rec, h.b.opts.StateTTL); err != nil {
		return nil, fmt.Errorf("store connection request: %w", err)
	}
	if err := h.prompter.PromptConnect(ctx, Prompt{Identity: h.id, URL: args.URL, Expires: expires, Call: h.call}); err != nil {
		return nil, fmt.Errorf("ask %s to connect: %w", h.id, err)
	}
	h.b.log.WithFields(logrus.Fields{"identity": h.id.String(), "thread": h.call.Thread, "call": h.call.Call}).Info("asked to connect to an MCP server")
	wctx, cancel := context.WithDeadline(ctx, expires)
	defer cancel()
	data, err := h.b.store.Receive(wctx, box(state))
	if err != nil {
		return nil, fmt.Errorf("%s: nobody connected in time: %w", h.id, ErrNotConnected)
	}
	var res callbackResult
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("authorization result: %w", err)
	}
	if res.Error != "" {
		return nil, fmt.Errorf("%s: %w (%s)", h.id, ErrDenied, oneLine(res.Error))
	}
	return &auth.AuthorizationResult{Code: res.Code, State: res.State, Iss: res.Iss}, nil
}

// newTokenSource saves a new token, and every renewal of it.
func (h *handler) newTokenSource(ctx context.Context, cfg *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
	c := &connection{
		ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, AuthURL: cfg.Endpoint.AuthURL, TokenURL: cfg.Endpoint.TokenURL,
		AuthStyle: int(cfg.Endpoint.AuthStyle), Scopes: cfg.Scopes, Connected: h.b.opts.Now(),
	}
	c.setToken(tok)
	if err := h.b.save(ctx, h.id, c); err != nil {
		return nil, err
	}
	h.b.log.WithField("identity", h.id.String()).Info("MCP connection made")
	return h.persisting(c, cfg.TokenSource(ctx, tok)), nil
}

func (c *connection) setToken(t *oauth2.Token) {
	c.AccessToken, c.TokenType, c.Expiry = t.AccessToken, t.TokenType, t.Expiry
	if t.RefreshToken != "" {
		c.RefreshToken = t.RefreshToken
	}
}

func (h *handler) persisting(c *connection, ts oauth2.TokenSource) oauth2.TokenSource {
	return &persistingSource{h: h, c: c, next: ts, last: c.AccessToken}
}

// persistingSource saves each new token of next.
type persistingSource struct {
	h    *handler
	next oauth2.TokenSource

	mu   sync.Mutex
	c    *connection
	last string
}

func (p *persistingSource) Token() (*oauth2.Token, error) {
	t, err := p.next.Token()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.AccessToken != p.last {
		p.last = t.AccessToken
		p.c.setToken(t)
		if err := p.h.b.save(context.Background(), p.h.id, p.c); err != nil {
			p.h.b.log.WithFields(logrus.Fields{"identity": p.h.id.String(), "error": err.Error()}).Warn("renewed MCP token not saved")
		}
	}
	return t, nil
}
