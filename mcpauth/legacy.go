package mcpauth

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
)

// The 2025-03-26 authorization of an MCP server that publishes no
// protected-resource metadata. That specification makes the root of the
// MCP server's origin its authorization server: the client reads the
// metadata at {origin}/.well-known/oauth-authorization-server (else uses
// {origin}/authorize, /token and /register, which the SDK does itself).
// Servers built for it often publish metadata whose issuer is not the
// origin but a path under it (https://mcp.example.com/oauth), which RFC
// 8414 §3.3 forbids and the SDK refuses. Such a document is accepted
// here, and only here:
//
//   - the server published no protected-resource metadata (the 401 has no
//     resource_metadata, and no well-known URL gives a valid document):
//     a server that says which authorization server it trusts gets the
//     SDK's exact issuer check, always;
//   - the document was fetched from the MCP server's own origin, and its
//     issuer and its authorization, token and registration endpoints are
//     all on that origin: the document speaks for no one but the server
//     the token is for, so it cannot send the bot, or a person's code,
//     to another authorization server (the mix-up RFC 8414 §3.3 guards
//     against);
//   - the issuer it names is then held to everywhere else: an
//     authorization response's iss must be that issuer (RFC 9207).
//
// The flow is then the SDK's (client ID metadata document, pre-registered
// client or dynamic registration; PKCE S256; the resource indicator) on
// golang.org/x/oauth2, with the same Prompter and callback.

// ErrForeignIssuer is wrapped by the error of a 2025-03-26 server whose
// authorization-server metadata names an issuer or an endpoint outside
// its own origin.
var ErrForeignIssuer = errors.New("the authorization server metadata names an issuer or an endpoint outside the MCP server's origin")

// origin is u's scheme and host: https://mcp.example.com:8443.
func origin(u *url.URL) string { return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) }

// CheckLegacyIssuer checks an issuer (or an endpoint, with endpoint
// true) that a 2025-03-26 server's metadata names against the origin
// of the server: the same scheme and host, no user information, and for
// an issuer no query or fragment (RFC 8414 §2). same reports that the
// issuer is the origin itself, which RFC 8414 accepts anyway.
func CheckLegacyIssuer(serverOrigin, issuer string, endpoint bool) (same bool, err error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Scheme != "https" && u.Scheme != "http" || u.Host == "" || u.User != nil || u.Opaque != "" {
		return false, ErrForeignIssuer
	}
	if !endpoint && (u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.Contains(issuer, "#")) {
		return false, ErrForeignIssuer
	}
	if origin(u) != serverOrigin {
		return false, ErrForeignIssuer
	}
	return !endpoint && (u.Path == "" || u.Path == "/"), nil
}

// declaredIssuer reads the issuer a metadata document names, to compare
// it with the origin before the SDK validates the document.
func declaredIssuer(ctx context.Context, hc *http.Client, metaURL string) (string, error) {
	status, body, err := getJSON(ctx, hc, metaURL)
	switch {
	case err != nil:
		return "", err
	case status != http.StatusOK:
		return "", fmt.Errorf("authorization server metadata: %s", http.StatusText(status))
	}
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", fmt.Errorf("authorization server metadata: %w", err)
	}
	return doc.Issuer, nil
}

// getJSON fetches a metadata document: its status, and its first MiB.
func getJSON(ctx context.Context, hc *http.Client, docURL string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, docURL, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

// authorizeLegacy runs after the SDK's authorization failed. handled is
// false when the server is not a 2025-03-26 one whose metadata names an
// issuer under its origin other than the origin: the SDK's error stands.
func (h *handler) authorizeLegacy(ctx context.Context, reqURL *url.URL, header http.Header) (handled bool, err error) {
	challenges, err := oauthex.ParseWWWAuthenticate(header.Values("WWW-Authenticate"))
	if err != nil || challengeParam(challenges, "resource_metadata") != "" {
		return false, nil
	}
	hc := h.b.opts.HTTPClient
	resource := reqURL.String()
	if _, found := findResourceMeta(ctx, hc, "", resource); found {
		return false, nil
	}
	serverOrigin := origin(reqURL)
	metaURL := serverOrigin + "/.well-known/oauth-authorization-server"
	issuer, err := declaredIssuer(ctx, hc, metaURL)
	if err != nil {
		return false, nil
	}
	same, err := CheckLegacyIssuer(serverOrigin, issuer, false)
	if err != nil {
		return true, fmt.Errorf("%s: metadata at %s names issuer %q: %w", h.id, metaURL, oneLine(issuer), err)
	}
	if same {
		return false, nil
	}
	asm, err := oauthex.GetAuthServerMeta(ctx, metaURL, issuer, hc)
	if err != nil || asm == nil {
		return true, fmt.Errorf("%s: authorization server metadata: %w", h.id, cmpErr(err, errors.New("none")))
	}
	for name, ep := range map[string]string{"authorization_endpoint": asm.AuthorizationEndpoint, "token_endpoint": asm.TokenEndpoint, "registration_endpoint": asm.RegistrationEndpoint} {
		if ep == "" && name == "registration_endpoint" {
			continue
		}
		if _, err := CheckLegacyIssuer(serverOrigin, ep, true); err != nil {
			return true, fmt.Errorf("%s: %s %q: %w", h.id, name, oneLine(ep), err)
		}
	}
	cfg, err := h.legacyClient(ctx, asm)
	if err != nil {
		return true, err
	}
	cfg.RedirectURL = h.b.opts.RedirectURL
	cfg.Scopes = h.scopes
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = strings.Fields(challengeParam(challenges, "scope"))
	}
	if slices.Contains(asm.ScopesSupported, "offline_access") && !slices.Contains(cfg.Scopes, "offline_access") {
		cfg.Scopes = append(cfg.Scopes, "offline_access")
	}
	verifier, state := oauth2.GenerateVerifier(), rand.Text()
	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", resource))
	res, err := h.fetch(ctx, &auth.AuthorizationArgs{URL: authURL})
	if err != nil {
		return true, err
	}
	if res.State != state {
		return true, fmt.Errorf("%s: %w", h.id, ErrNoState)
	}
	// RFC 9207: a response that names its issuer names this one.
	if res.Iss != "" && res.Iss != asm.Issuer || res.Iss == "" && asm.AuthorizationResponseIssParameterSupported {
		return true, fmt.Errorf("%s: the authorization response names issuer %q, not %q: %w", h.id, oneLine(res.Iss), asm.Issuer, ErrForeignIssuer)
	}
	xctx := context.WithValue(ctx, oauth2.HTTPClient, hc)
	tok, err := cfg.Exchange(xctx, res.Code, oauth2.VerifierOption(verifier), oauth2.SetAuthURLParam("resource", resource))
	if err != nil {
		return true, fmt.Errorf("%s: token request: %w", h.id, err)
	}
	ts, err := h.newTokenSource(context.WithValue(context.Background(), oauth2.HTTPClient, hc), cfg, tok)
	if err != nil {
		return true, err
	}
	h.mu.Lock()
	h.legacy = ts
	h.mu.Unlock()
	h.b.log.WithField("identity", h.id.String()).Info("MCP connection made with 2025-03-26 authorization server metadata")
	return true, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// legacyClient is who the bot is at the authorization server, in the
// SDK's order: its client ID metadata document where the server takes
// one, the pre-registered client, else dynamic registration.
func (h *handler) legacyClient(ctx context.Context, asm *oauthex.AuthServerMeta) (*oauth2.Config, error) {
	c := h.config
	endpoint := oauth2.Endpoint{AuthURL: asm.AuthorizationEndpoint, TokenURL: asm.TokenEndpoint}
	switch {
	case c.ClientIDMetadataDocumentConfig != nil && asm.ClientIDMetadataDocumentSupported:
		endpoint.AuthStyle = oauth2.AuthStyleInParams
		return &oauth2.Config{ClientID: c.ClientIDMetadataDocumentConfig.URL, Endpoint: endpoint}, nil
	case c.PreregisteredClient != nil:
		cfg := &oauth2.Config{ClientID: c.PreregisteredClient.ClientID, Endpoint: endpoint}
		if c.PreregisteredClient.ClientSecretAuth != nil {
			cfg.ClientSecret = c.PreregisteredClient.ClientSecretAuth.ClientSecret
		}
		cfg.Endpoint.AuthStyle = authStyle(asm.TokenEndpointAuthMethodsSupported)
		return cfg, nil
	case c.DynamicClientRegistrationConfig != nil && asm.RegistrationEndpoint != "":
		reg, err := oauthex.RegisterClient(ctx, asm.RegistrationEndpoint, c.DynamicClientRegistrationConfig.Metadata, h.b.opts.HTTPClient)
		if err != nil {
			return nil, fmt.Errorf("%s: register: %w", h.id, err)
		}
		endpoint.AuthStyle = oauth2.AuthStyleInHeader
		if reg.TokenEndpointAuthMethod == "none" || reg.TokenEndpointAuthMethod == "client_secret_post" {
			endpoint.AuthStyle = oauth2.AuthStyleInParams
		}
		return &oauth2.Config{ClientID: reg.ClientID, ClientSecret: reg.ClientSecret, Endpoint: endpoint}, nil
	}
	return nil, fmt.Errorf("%s: the authorization server takes none of the bot's ways to register", h.id)
}

// authStyle is how a pre-registered client authenticates at the token
// endpoint: post where the server takes it, else basic, as the SDK
// chooses.
func authStyle(supported []string) oauth2.AuthStyle {
	switch {
	case slices.Contains(supported, "client_secret_post"):
		return oauth2.AuthStyleInParams
	case slices.Contains(supported, "client_secret_basic"):
		return oauth2.AuthStyleInHeader
	}
	return oauth2.AuthStyleAutoDetect
}
