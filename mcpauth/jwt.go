package mcpauth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// The client credentials grant with private_key_jwt client authentication
// (RFC 7523): the bot proves who it is with a short-lived JWT signed by
// its key (ES256 for an EC P-256 key, RS256 for an RSA key) rather than a
// secret. The SDK's client credentials handler knows secrets only; this
// one discovers the token endpoint the same way (protected-resource
// metadata, then authorization-server metadata) with the SDK's functions.

// ErrBadPrivateKey is wrapped by the error of a private key that is not a
// PEM PKCS#8 (or PKCS#1, SEC 1) EC P-256 or RSA key.
var ErrBadPrivateKey = errors.New("want a PEM EC P-256 or RSA private key")

type jwtHandler struct {
	clientID string
	key      crypto.Signer
	alg      string
	scopes   []string
	hc       *http.Client
	now      func() time.Time

	mu sync.Mutex
	ts oauth2.TokenSource
}

var _ auth.OAuthHandler = (*jwtHandler)(nil)

func parsePrivateKey(pemText string) (crypto.Signer, string, error) {
	block, _ := pem.Decode([]byte(pemText))
	if block == nil {
		return nil, "", ErrBadPrivateKey
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrBadPrivateKey, err)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve.Params().BitSize != 256 {
			return nil, "", ErrBadPrivateKey
		}
		return k, "ES256", nil
	case *rsa.PrivateKey:
		return k, "RS256", nil
	}
	return nil, "", ErrBadPrivateKey
}

func (h *jwtHandler) TokenSource(context.Context) (oauth2.TokenSource, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ts, nil
}

func (h *jwtHandler) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	defer resp.Body.Close()
	defer io.Copy(io.Discard, resp.Body)
	challenges, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return fmt.Errorf("WWW-Authenticate: %w", err)
	}
	if resp.StatusCode == http.StatusForbidden && challengeParam(challenges, "error") != "insufficient_scope" {
		return nil
	}
	resource := req.URL.String()
	prm := h.resourceMeta(ctx, challengeParam(challenges, "resource_metadata"), resource)
	asm, err := auth.GetAuthServerMetadata(ctx, prm.AuthorizationServers[0], h.hc)
	if err != nil {
		return fmt.Errorf("authorization server metadata: %w", err)
	}
	if asm == nil {
		return errors.New("the authorization server publishes no metadata")
	}
	scopes := h.scopes
	if len(scopes) == 0 {
		if s := challengeParam(challenges, "scope"); s != "" {
			scopes = strings.Fields(s)
		} else {
			scopes = prm.ScopesSupported
		}
	}
	src := &assertionSource{h: h, tokenURL: asm.TokenEndpoint, audience: asm.Issuer, scopes: scopes, resource: prm.Resource}
	tok, err := src.Token()
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.ts = oauth2.ReuseTokenSource(tok, src)
	h.mu.Unlock()
	return nil
}

func challengeParam(cs []oauthex.Challenge, name string) string {
	for _, c := range cs {
		if v := c.Params[name]; v != "" && (name == "resource_metadata" || c.Scheme == "bearer") {
			return v
		}
	}
	return ""
}

// resourceMeta finds the protected-resource metadata: at the challenge's
// URL, then the well-known URLs; without any, the server's root is its
// authorization server (2025-03-26).
func (h *jwtHandler) resourceMeta(ctx context.Context, fromChallenge, resource string) *oauthex.ProtectedResourceMetadata {
	prm, _ := findResourceMeta(ctx, h.hc, fromChallenge, resource)
	return prm
}

// findResourceMeta finds the protected-resource metadata as the SDK's
// handlers do: at the challenge's URL, then at the path of the MCP
// endpoint, then at the root. found is false when none answers with a
// valid document naming an authorization server; prm is then what the
// 2025-03-26 specification says: the root of the server's origin is its
// authorization server.
func findResourceMeta(ctx context.Context, hc *http.Client, fromChallenge, resource string) (prm *oauthex.ProtectedResourceMetadata, found bool) {
	u, _ := url.Parse(resource)
	var tries [][2]string
	if fromChallenge != "" {
		tries = append(tries, [2]string{fromChallenge, resource})
	}
	if u != nil {
		at, root := *u, *u
		at.Path = "/.well-known/oauth-protected-resource/" + strings.TrimLeft(u.Path, "/")
		at.RawPath, at.RawQuery = "", ""
		root.Path, root.RawPath, root.RawQuery = "", "", ""
		well := root
		well.Path = "/.well-known/oauth-protected-resource"
		tries = append(tries, [2]string{at.String(), resource}, [2]string{well.String(), root.String()})
	}
	for _, t := range tries {
		if prm, err := oauthex.GetProtectedResourceMetadata(ctx, t[0], t[1], hc); err == nil && prm != nil && len(prm.AuthorizationServers) > 0 {
			return prm, true
		}
	}
	base := resource
	if u != nil {
		base = origin(u)
	}
	return &oauthex.ProtectedResourceMetadata{Resource: resource, AuthorizationServers: []string{base}}, false
}

// assertionSource asks for a token with a fresh assertion each time.
type assertionSource struct {
	h                  *jwtHandler
	tokenURL, audience string
	scopes             []string
	resource           string
}

func (s *assertionSource) Token() (*oauth2.Token, error) {
	assertion, err := s.h.sign(s.audience)
	if err != nil {
		return nil, err
	}
	params := url.Values{
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
		"client_assertion":      {assertion},
	}
	if s.resource != "" {
		params.Set("resource", s.resource)
	}
	cfg := clientcredentials.Config{ClientID: s.h.clientID, TokenURL: s.tokenURL, Scopes: s.scopes, EndpointParams: params, AuthStyle: oauth2.AuthStyleInParams}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, s.h.hc)
	tok, err := cfg.Token(ctx)
	if err != nil {
		return nil, fmt.Errorf("client credentials token: %w", err)
	}
	return tok, nil
}

// sign makes the client assertion: iss and sub the client, aud the
// authorization server, valid five minutes, used once (jti).
func (h *jwtHandler) sign(audience string) (string, error) {
	now := h.now()
	header, _ := json.Marshal(map[string]string{"alg": h.alg, "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{
		"iss": h.clientID, "sub": h.clientID, "aud": audience,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(), "jti": rand.Text(),
	})
	enc := base64.RawURLEncoding
	input := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(input))
	var sig []byte
	switch k := h.key.(type) {
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
		if err != nil {
			return "", fmt.Errorf("sign client assertion: %w", err)
		}
		sig = append(fixed(r, 32), fixed(s, 32)...)
	case *rsa.PrivateKey:
		var err error
		if sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:]); err != nil {
			return "", fmt.Errorf("sign client assertion: %w", err)
		}
	default:
		return "", ErrBadPrivateKey
	}
	return input + "." + enc.EncodeToString(sig), nil
}

func fixed(n *big.Int, size int) []byte {
	b := make([]byte, size)
	return n.FillBytes(b)
}
