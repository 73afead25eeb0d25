package mcpauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/sirupsen/logrus"
	"golang.org/x/oauth2"

	"github.com/countersign/countersign/tools"
)

// Enterprise-managed authorization (SEP-990), for a server whose oauth:
// names an identity_provider (auth: requester only). The call runs as
// the person who asked for it, on the strength of their sign-in at their
// organisation's identity provider rather than a consent at each server:
//
//  1. the person's ID token: their OpenID Connect sign-in at the identity
//     provider, through the same Connect prompt and callback as any
//     connection (Options.IDToken replaces it);
//  2. token exchange at the identity provider (RFC 8693): the ID token
//     for an identity assertion authorization grant (ID-JAG) whose
//     audience is the server's authorization server and whose resource
//     is the server;
//  3. the JWT bearer grant at the server's authorization server (RFC
//     7523): the ID-JAG for an access token, the bot authenticating as
//     its client there, in the way the server's metadata says.
//
// The access token is sealed and kept as the person's connection until
// it expires; the ID token and the ID-JAG are used once and kept nowhere.
// The SDK's extauth.EnterpriseHandler does the same steps but always
// sends the client secret in the form, and needs the authorization
// server up front; this one discovers it from the resource metadata.

const grantJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// ErrNoIDToken is wrapped by the error of an enterprise-managed
// connection whose person has no ID token to exchange.
var ErrNoIDToken = errors.New("no ID token from the identity provider")

type idjagHandler struct {
	h   *handler // the identity, the prompt and the store
	cfg tools.MCPServer

	mu  sync.Mutex
	tok *oauth2.Token
}

var _ auth.OAuthHandler = (*idjagHandler)(nil)

func (b *Broker) idjagHandler(cfg tools.MCPServer, id Identity, prompter Prompter, call tools.CallInfo) (*idjagHandler, error) {
	// The sign-in at the identity provider is completed by the process
	// whose call waits for it: a paused request (pause.go) would exchange
	// the code at the MCP server's token endpoint, not the identity
	// provider's, so this wait does not pause the run.
	call.CanPause = false
	e := &idjagHandler{h: &handler{b: b, id: id, prompter: prompter, call: call}, cfg: cfg}
	c, err := b.load(context.Background(), id)
	switch {
	case errors.Is(err, ErrOpen):
		b.log.WithField("identity", id.String()).Warn("MCP connection sealed with another key; asking to connect again")
	case err != nil:
		return nil, err
	case c != nil:
		e.tok = c.token()
	}
	return e, nil
}

// TokenSource gives the kept token while it is valid, and none after:
// the server's 401 then makes a new one (Authorize).
func (e *idjagHandler) TokenSource(context.Context) (oauth2.TokenSource, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Its own expiry, not oauth2's (which treats a token as expired ten
	// seconds early): a short-lived token is still used.
	if e.tok == nil || e.tok.AccessToken == "" || !e.tok.Expiry.IsZero() && !e.h.b.opts.Now().Before(e.tok.Expiry) {
		return nil, nil
	}
	return oauth2.StaticTokenSource(e.tok), nil
}

func (e *idjagHandler) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	defer resp.Body.Close()
	defer io.Copy(io.Discard, resp.Body)
	err := e.authorize(ctx, req, resp)
	if err != nil {
		e.h.b.log.WithFields(logrus.Fields{"identity": e.h.id.String(), "status": resp.StatusCode, "error": err.Error()}).Info("MCP authorization did not complete")
	}
	return err
}

func (e *idjagHandler) authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	hc := e.h.b.opts.HTTPClient
	challenges, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return fmt.Errorf("WWW-Authenticate: %w", err)
	}
	if resp.StatusCode == http.StatusForbidden && challengeParam(challenges, "error") != "insufficient_scope" {
		return nil
	}
	prm, _ := findResourceMeta(ctx, hc, challengeParam(challenges, "resource_metadata"), req.URL.String())
	asm, err := auth.GetAuthServerMetadata(ctx, prm.AuthorizationServers[0], hc)
	if err != nil {
		return fmt.Errorf("authorization server metadata: %w", err)
	}
	if asm == nil {
		return errors.New("the authorization server publishes no metadata")
	}
	scopes := e.cfg.OAuth.Scopes
	if len(scopes) == 0 {
		if s := challengeParam(challenges, "scope"); s != "" {
			scopes = strings.Fields(s)
		} else {
			scopes = prm.ScopesSupported
		}
	}
	idp := e.cfg.OAuth.IdentityProvider
	idpCreds := &oauthex.ClientCredentials{ClientID: idp.ClientID}
	if idp.ClientSecret != "" {
		idpCreds.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: idp.ClientSecret}
	}
	idToken, err := e.idToken(ctx, idpCreds)
	if err != nil {
		return err
	}
	tokenEndpoint, err := idpTokenEndpoint(ctx, hc, idp.Issuer)
	if err != nil {
		return fmt.Errorf("%s: %w", e.h.id, err)
	}
	jag, err := oauthex.ExchangeToken(ctx, tokenEndpoint, &oauthex.TokenExchangeRequest{
		RequestedTokenType: oauthex.TokenTypeIDJAG,
		Audience:           asm.Issuer,
		Resource:           prm.Resource,
		Scope:              scopes,
		SubjectToken:       idToken,
		SubjectTokenType:   oauthex.TokenTypeIDToken,
	}, idpCreds, hc)
	if err != nil {
		return fmt.Errorf("%s: token exchange at the identity provider: %w", e.h.id, err)
	}
	if t, _ := jag.Extra("issued_token_type").(string); t != "" && t != oauthex.TokenTypeIDJAG {
		return fmt.Errorf("%s: the identity provider issued %q, not an identity assertion grant", e.h.id, oneLine(t))
	}
	cfg := &oauth2.Config{ClientID: e.cfg.OAuth.ClientID, ClientSecret: e.cfg.OAuth.ClientSecret,
		Endpoint: oauth2.Endpoint{TokenURL: asm.TokenEndpoint, AuthStyle: authStyle(asm.TokenEndpointAuthMethodsSupported)}}
	opts := []oauth2.AuthCodeOption{oauth2.SetAuthURLParam("grant_type", grantJWTBearer), oauth2.SetAuthURLParam("assertion", jag.AccessToken)}
	if len(scopes) > 0 {
		opts = append(opts, oauth2.SetAuthURLParam("scope", strings.Join(scopes, " ")))
	}
	// Exchange with an empty code: oauth2 sends code= along, which RFC
	// 6749 §3.2 has the server treat as absent.
	tok, err := cfg.Exchange(context.WithValue(ctx, oauth2.HTTPClient, hc), "", opts...)
	if err != nil {
		return fmt.Errorf("%s: JWT bearer grant: %w", e.h.id, err)
	}
	c := &connection{ClientID: cfg.ClientID, TokenURL: cfg.Endpoint.TokenURL, AuthStyle: int(cfg.Endpoint.AuthStyle), Scopes: scopes, Connected: e.h.b.opts.Now()}
	c.setToken(&oauth2.Token{AccessToken: tok.AccessToken, TokenType: tok.TokenType, Expiry: tok.Expiry})
	if err := e.h.b.save(ctx, e.h.id, c); err != nil {
		return err
	}
	e.mu.Lock()
	e.tok = c.token()
	e.mu.Unlock()
	e.h.b.log.WithField("identity", e.h.id.String()).Info("MCP connection made through the identity provider")
	return nil
}

// idToken is the person's ID token: from Options.IDToken, else their
// sign-in at the identity provider (OpenID Connect with PKCE), asked for
// through the Prompter and completed by the callback.
func (e *idjagHandler) idToken(ctx context.Context, creds *oauthex.ClientCredentials) (string, error) {
	if f := e.h.b.opts.IDToken; f != nil {
		tok, err := f(ctx, e.h.id)
		if err != nil || tok == "" {
			return "", fmt.Errorf("%s: %w: %w", e.h.id, ErrNoIDToken, cmpErr(err, ErrNotConnected))
		}
		return tok, nil
	}
	if e.h.prompter == nil {
		return "", fmt.Errorf("%s: %w", e.h.id, ErrNotConnected)
	}
	tok, err := extauth.PerformOIDCLogin(ctx, &extauth.OIDCLoginConfig{
		IssuerURL: e.cfg.OAuth.IdentityProvider.Issuer, Credentials: creds, RedirectURL: e.h.b.opts.RedirectURL,
		Scopes: []string{"openid"}, HTTPClient: e.h.b.opts.HTTPClient,
	}, e.h.fetch)
	if err != nil {
		return "", fmt.Errorf("%s: sign-in at the identity provider: %w", e.h.id, err)
	}
	id, _ := tok.Extra("id_token").(string)
	if id == "" {
		return "", fmt.Errorf("%s: %w", e.h.id, ErrNoIDToken)
	}
	return id, nil
}

// ErrIdPMetadata is wrapped by the error of an identity provider whose
// metadata is missing or does not hold.
var ErrIdPMetadata = errors.New("the identity provider's metadata")

// idpTokenEndpoint finds the identity provider's token endpoint in its
// metadata (RFC 8414, else OpenID Connect discovery, at the well-known
// URLs of its issuer). The SDK's discovery also demands PKCE, which the
// token exchange does not use and an identity provider need not
// announce; the rest is checked the same: the document names exactly
// the configured issuer, and the endpoint is https (or loopback http).
func idpTokenEndpoint(ctx context.Context, hc *http.Client, issuer string) (string, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%w: issuer %q is not a URL", ErrIdPMetadata, oneLine(issuer))
	}
	path := strings.TrimSuffix(u.Path, "/")
	tries := []string{
		origin(u) + "/.well-known/oauth-authorization-server" + path,
		origin(u) + "/.well-known/openid-configuration" + path,
	}
	if path != "" {
		tries = append(tries, origin(u)+path+"/.well-known/openid-configuration")
	}
	for _, metaURL := range tries {
		status, body, err := getJSON(ctx, hc, metaURL)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrIdPMetadata, err)
		}
		if status >= 400 && status < 500 {
			continue
		}
		if status != http.StatusOK {
			return "", fmt.Errorf("%w: %s answered %d %s", ErrIdPMetadata, metaURL, status, http.StatusText(status))
		}
		return ParseIdPMetadata(issuer, body)
	}
	return "", fmt.Errorf("%w: none at %s", ErrIdPMetadata, issuer)
}

// ParseIdPMetadata reads the token endpoint of an identity provider's
// metadata document, which must name issuer (a trailing slash aside)
// and an https (or loopback http) token endpoint.
func ParseIdPMetadata(issuer string, doc []byte) (string, error) {
	var meta struct {
		Issuer        string `json:"issuer"`
		TokenEndpoint string `json:"token_endpoint"`
	}
	if err := json.Unmarshal(doc, &meta); err != nil {
		return "", fmt.Errorf("%w: %w", ErrIdPMetadata, err)
	}
	if iu, err := url.Parse(issuer); err != nil || iu.Host == "" {
		return "", fmt.Errorf("%w: issuer %q is not a URL", ErrIdPMetadata, oneLine(issuer))
	}
	if strings.TrimSuffix(meta.Issuer, "/") != strings.TrimSuffix(issuer, "/") {
		return "", fmt.Errorf("%w: it names issuer %q, not %q", ErrIdPMetadata, oneLine(meta.Issuer), oneLine(issuer))
	}
	u, err := url.Parse(meta.TokenEndpoint)
	if err != nil || u.Host == "" || u.User != nil || !(u.Scheme == "https" || u.Scheme == "http" && loopback(u.Hostname())) {
		return "", fmt.Errorf("%w: token_endpoint %q is not an https URL", ErrIdPMetadata, oneLine(meta.TokenEndpoint))
	}
	return meta.TokenEndpoint, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
