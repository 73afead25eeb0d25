package tools

import (
	"errors"
	"fmt"
	"net/url"

	"gopkg.in/yaml.v3"
)

// MCPAuth says whose identity the calls to an HTTP MCP server run as.
type MCPAuth int

// The identities of MCP servers.
const (
	// AuthStatic: no OAuth; the server gets its headers: only.
	AuthStatic MCPAuth = iota
	// AuthService: one identity for the bot, from the client credentials
	// grant or a connection an admin makes once (bot mcp connect).
	AuthService
	// AuthRequester: a call runs with the token of the person who asked
	// for the turn; who has no connection is asked to connect.
	AuthRequester
)

func (a MCPAuth) String() string {
	switch a {
	case AuthStatic:
		return "static"
	case AuthService:
		return "service"
	case AuthRequester:
		return "requester"
	}
	return fmt.Sprintf("MCPAuth(%d)", int(a))
}

// Grants of MCPOAuth.
const (
	GrantAuthorizationCode = "authorization_code"
	GrantClientCredentials = "client_credentials"
)

// MCPOAuth is an MCP server's oauth: settings: how the bot is known to
// the server's authorization server. Everything is optional: without a
// client_id the bot uses client_metadata_url where the authorization
// server accepts client ID metadata documents, else registers itself
// (dynamic client registration).
//
//	mcp_servers:
//	  tickets:
//	    url: https://mcp.example.com/mcp
//	    auth: requester                 # or service
//	    oauth:
//	      client_id: countersign        # a pre-registered client
//	      client_secret: ${TICKETS_OAUTH_SECRET}
//	      private_key: ${TICKETS_KEY_PEM} # client_credentials: private_key_jwt
//	      client_metadata_url: https://bot.example.com/oauth/client.json
//	      scopes: [tickets.read, tickets.write]
//	      grant: client_credentials     # auth: service only
//	      identity_provider:            # auth: requester: SEP-990
//	        issuer: https://acme.okta.com
//	        client_id: countersign-at-okta
//	        client_secret: ${OKTA_SECRET}
type MCPOAuth struct {
	ClientID     string
	ClientSecret string // a secret: in MCPServer.Secrets, never logged
	// PrivateKey is a PEM private key (EC P-256 or RSA) the client
	// credentials grant signs its client assertion with (private_key_jwt)
	// instead of sending ClientSecret. A secret.
	PrivateKey string
	// ClientMetadataURL is the bot's client ID metadata document (an
	// https URL with a path).
	ClientMetadataURL string
	// Scopes replace the scopes the server asks for, when set.
	Scopes []string
	// Grant is GrantAuthorizationCode (default) or GrantClientCredentials.
	Grant string
	// IdentityProvider, when set, is the enterprise identity provider
	// the requester signs in at (enterprise-managed authorization,
	// SEP-990): their ID token is exchanged there for an identity
	// assertion grant (RFC 8693), which the server's authorization
	// server takes for a token (RFC 7523) from the client ClientID.
	IdentityProvider *MCPIdentityProvider
}

// MCPIdentityProvider is an oauth: identity_provider: the issuer of the
// people's ID tokens, and the bot's client there.
type MCPIdentityProvider struct {
	Issuer       string
	ClientID     string
	ClientSecret string // a secret: in MCPServer.Secrets, never logged
}

var (
	mcpOAuthKeys = []string{"client_id", "client_secret", "private_key", "client_metadata_url", "scopes", "grant", "identity_provider"}
	mcpIdPKeys   = []string{"issuer", "client_id", "client_secret"}
)

func parseMCPIdP(name string, n *yaml.Node, getenv func(string) string, s *MCPServer) error {
	if n.Kind != yaml.MappingNode {
		return errors.New("want a mapping of issuer, client_id, client_secret")
	}
	idp := &MCPIdentityProvider{}
	where := fmt.Sprintf(" in the oauth: identity_provider: of MCP server %q", name)
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], resolve(n.Content[i+1])
		if err := checkKey(key, seen, where, mcpIdPKeys); err != nil {
			return err
		}
		if val.Kind != yaml.ScalarNode {
			return lineErrorf(val, "MCP server %q: oauth: identity_provider: %s: want a string", name, key.Value)
		}
		v, fromEnv, err := expandEnv(val.Value, getenv)
		if err != nil {
			return lineErrorf(val, "MCP server %q: oauth: identity_provider: %s: %v", name, key.Value, err)
		}
		switch key.Value {
		case "issuer":
			idp.Issuer = v
			if u, perr := url.Parse(v); perr != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" ||
				u.Scheme != "https" && !(u.Scheme == "http" && (u.Hostname() == "localhost" || u.Hostname() == "127.0.0.1" || u.Hostname() == "::1")) {
				return lineErrorf(val, "MCP server %q: oauth: identity_provider: issuer: want an https URL without a query (http only on a loopback address)", name)
			}
		case "client_id":
			idp.ClientID = v
		case "client_secret":
			idp.ClientSecret = v
			s.Secrets.Add(v)
		}
		s.Secrets.AddExpanded(v, fromEnv)
	}
	if idp.Issuer == "" || idp.ClientID == "" {
		return lineErrorf(n, "MCP server %q: oauth: identity_provider: needs issuer and client_id", name)
	}
	s.OAuth.IdentityProvider = idp
	return nil
}

func parseMCPAuth(n *yaml.Node) (MCPAuth, error) {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "service":
			return AuthService, nil
		case "requester":
			return AuthRequester, nil
		}
	}
	return AuthStatic, errors.New("want service or requester")
}

func parseMCPOAuth(name string, n *yaml.Node, getenv func(string) string, s *MCPServer) error {
	if n.Kind != yaml.MappingNode {
		return errors.New("want a mapping of client_id, client_secret, client_metadata_url, scopes, grant")
	}
	where := fmt.Sprintf(" in the oauth: of MCP server %q", name)
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], resolve(n.Content[i+1])
		if err := checkKey(key, seen, where, mcpOAuthKeys); err != nil {
			return err
		}
		var err error
		switch key.Value {
		case "client_id", "client_secret", "private_key", "client_metadata_url":
			if val.Kind != yaml.ScalarNode {
				err = errors.New("want a string")
				break
			}
			var v string
			var fromEnv []Span
			if v, fromEnv, err = expandEnv(val.Value, getenv); err != nil {
				break
			}
			switch key.Value {
			case "client_id":
				s.OAuth.ClientID = v
			case "client_secret":
				s.OAuth.ClientSecret = v
				s.Secrets.Add(v)
			case "private_key":
				s.OAuth.PrivateKey = v
				s.Secrets.Add(v)
			case "client_metadata_url":
				s.OAuth.ClientMetadataURL = v
				if u, perr := url.Parse(v); perr != nil || u.Scheme != "https" || u.Path == "" || u.Path == "/" {
					err = errors.New("want an https URL with a path")
				}
			}
			s.Secrets.AddExpanded(v, fromEnv)
		case "scopes":
			s.OAuth.Scopes, err = stringList(val)
		case "identity_provider":
			if err := parseMCPIdP(name, val, getenv, s); err != nil {
				return err
			}
		case "grant":
			if val.Kind != yaml.ScalarNode || (val.Value != GrantAuthorizationCode && val.Value != GrantClientCredentials) {
				err = errors.New("want authorization_code or client_credentials")
			}
			s.OAuth.Grant = val.Value
		}
		if err != nil {
			return lineErrorf(val, "MCP server %q: oauth: %s: %v", name, key.Value, err)
		}
	}
	return nil
}

// checkMCPAuth checks that auth: and oauth: fit together and with the
// server's transport.
func checkMCPAuth(n *yaml.Node, s *MCPServer, seen map[string]bool) error {
	if s.OAuth.Grant == "" && s.Auth != AuthStatic {
		s.OAuth.Grant = GrantAuthorizationCode
	}
	switch {
	case (seen["auth"] || seen["oauth"]) && !seen["url"]:
		return lineErrorf(n, "MCP server %q: auth: and oauth: apply only to a url: server", s.Name)
	case seen["oauth"] && !seen["auth"]:
		return lineErrorf(n, "MCP server %q: oauth: needs auth: service or auth: requester", s.Name)
	case s.OAuth.Grant == GrantClientCredentials && s.Auth != AuthService:
		return lineErrorf(n, "MCP server %q: the client_credentials grant is the bot's own identity: want auth: service", s.Name)
	case s.OAuth.Grant == GrantClientCredentials && (s.OAuth.ClientID == "" || s.OAuth.ClientSecret == "" && s.OAuth.PrivateKey == ""):
		return lineErrorf(n, "MCP server %q: the client_credentials grant needs client_id, and client_secret or private_key", s.Name)
	case s.OAuth.PrivateKey != "" && s.OAuth.Grant != GrantClientCredentials:
		return lineErrorf(n, "MCP server %q: oauth: private_key applies to grant: client_credentials", s.Name)
	case s.OAuth.ClientSecret != "" && s.OAuth.ClientID == "":
		return lineErrorf(n, "MCP server %q: oauth: client_secret needs client_id", s.Name)
	case s.OAuth.IdentityProvider != nil && (s.Auth != AuthRequester || s.OAuth.Grant != GrantAuthorizationCode):
		return lineErrorf(n, "MCP server %q: oauth: identity_provider exchanges the requester's own sign-in: want auth: requester, without grant: client_credentials", s.Name)
	case s.OAuth.IdentityProvider != nil && s.OAuth.ClientID == "":
		return lineErrorf(n, "MCP server %q: oauth: identity_provider needs the client_id the server's authorization server knows the bot by", s.Name)
	}
	return nil
}
