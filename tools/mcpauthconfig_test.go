package tools_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/tools"
)

func TestParseMCPAuth(t *testing.T) {
	getenv := env("TICKETS_SECRET", "s3cret-value", "SLACK_BOT_TOKEN", "xoxb-bot-secret-1")
	tests := []struct {
		name, y string
		want    tools.MCPAuth
		err     string
	}{
		{"requester", "url: https://h/mcp\n    auth: requester\n", tools.AuthRequester, ""},
		{"service with client credentials", "url: https://h/mcp\n    auth: service\n    oauth: {client_id: c, client_secret: \"${TICKETS_SECRET}\", grant: client_credentials}\n", tools.AuthService, ""},
		{"no auth", "url: https://h/mcp\n", tools.AuthStatic, ""},
		{"bad value", "url: https://h/mcp\n    auth: everyone\n", 0, "want service or requester"},
		{"stdio", "command: [x]\n    auth: requester\n", 0, "only to a url: server"},
		{"oauth without auth", "url: https://h/mcp\n    oauth: {client_id: c}\n", 0, "needs auth:"},
		{"client credentials as requester", "url: https://h/mcp\n    auth: requester\n    oauth: {client_id: c, client_secret: s, grant: client_credentials}\n", 0, "want auth: service"},
		{"client credentials without secret", "url: https://h/mcp\n    auth: service\n    oauth: {client_id: c, grant: client_credentials}\n", 0, "needs client_id, and client_secret or private_key"},
		{"metadata URL not https", "url: https://h/mcp\n    auth: service\n    oauth: {client_metadata_url: \"http://bot/client.json\"}\n", 0, "https URL with a path"},
		{"unknown key", "url: https://h/mcp\n    auth: service\n    oauth: {client: c}\n", 0, "client"},
		{"bot secret", "url: https://h/mcp\n    auth: service\n    oauth: {client_id: c, client_secret: \"${SLACK_BOT_TOKEN}\"}\n", 0, "never given the bot's own secrets"},
		{"identity provider", "url: https://h/mcp\n    auth: requester\n    oauth: {client_id: c, client_secret: at-server-secret-1, identity_provider: {issuer: \"https://idp.example.com\", client_id: bot, client_secret: \"${TICKETS_SECRET}\"}}\n", tools.AuthRequester, ""},
		{"identity provider as service", "url: https://h/mcp\n    auth: service\n    oauth: {client_id: c, identity_provider: {issuer: \"https://idp.example.com\", client_id: bot}}\n", 0, "want auth: requester"},
		{"identity provider without client", "url: https://h/mcp\n    auth: requester\n    oauth: {identity_provider: {issuer: \"https://idp.example.com\", client_id: bot}}\n", 0, "needs the client_id"},
		{"identity provider not https", "url: https://h/mcp\n    auth: requester\n    oauth: {client_id: c, identity_provider: {issuer: \"http://idp.example.com\", client_id: bot}}\n", 0, "https URL"},
		{"identity provider without issuer", "url: https://h/mcp\n    auth: requester\n    oauth: {client_id: c, identity_provider: {client_id: bot}}\n", 0, "needs issuer and client_id"},
	}
	for _, tt := range tests {
		p, err := tools.ParsePolicyEnv([]byte("mcp_servers:\n  tickets:\n    "+tt.y), getenv)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: ParsePolicy = %v, want an error with %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: ParsePolicy = %v", tt.name, err)
			continue
		}
		s := p.MCPServers["tickets"]
		if s.Auth != tt.want {
			t.Errorf("%s: auth = %v, want %v", tt.name, s.Auth, tt.want)
		}
		if s.OAuth.ClientSecret != "" && s.Secrets.Redact("x "+s.OAuth.ClientSecret) == "x "+s.OAuth.ClientSecret {
			t.Errorf("%s: the client secret is not among the server's secrets", tt.name)
		}
		if idp := s.OAuth.IdentityProvider; idp != nil && (idp.Issuer != "https://idp.example.com" || s.Secrets.Redact("x "+idp.ClientSecret) == "x "+idp.ClientSecret) {
			t.Errorf("%s: identity provider = %+v, want its issuer and its secret among the server's secrets", tt.name, idp)
		}
	}
	_, err := tools.ParsePolicyEnv([]byte("mcp_servers:\n  tickets:\n    url: https://h/mcp\n    auth: service\n    oauth: {client_id: c, client_secret: \"${SLACK_BOT_TOKEN}\"}\n"), getenv)
	if !errors.Is(err, tools.ErrBotSecret) {
		t.Errorf("a bot secret as client_secret = %v, want ErrBotSecret", err)
	}
}
