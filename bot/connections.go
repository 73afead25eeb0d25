package bot

import (
	"context"
	"fmt"

	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// Connections are people's own connections to the policy's MCP servers
// that run calls as the person who asked (auth: requester), for a front
// end that lets each person see, make and revoke theirs (the Slack Home
// tab). Every method acts for user only: the caller says who is asking,
// from what it verified (a signed Slack request), never from what a
// button carries. Safe for concurrent use.
type Connections struct {
	auth   *mcpauth.Broker
	policy *tools.Policy
}

// Connections returns the people's connections of b.
func (b *Bot) Connections() *Connections { return &Connections{auth: b.Auth, policy: b.Policy} }

// personal returns the auth: requester server named server.
func (c *Connections) personal(server string) (tools.MCPServer, error) {
	cfg, ok := c.policy.MCPServers[server]
	if !ok || cfg.Auth != tools.AuthRequester {
		return tools.MCPServer{}, fmt.Errorf("%q: %w", server, mcpauth.ErrNotPersonal)
	}
	return cfg, nil
}

// Personal lists the servers that run calls as the person who asked,
// with user's connection to each.
func (c *Connections) Personal(ctx context.Context, user string) ([]mcpauth.Personal, error) {
	var servers []string
	for name, cfg := range c.policy.MCPServers {
		if cfg.Auth == tools.AuthRequester {
			servers = append(servers, name)
		}
	}
	if len(servers) == 0 {
		return nil, nil
	}
	return c.auth.Personal(ctx, user, servers)
}

// Revoke deletes user's connection to server, as `bot mcp revoke SERVER
// --user USER` does; it reports whether there was one.
func (c *Connections) Revoke(ctx context.Context, user, server string) (bool, error) {
	cfg, err := c.personal(server)
	if err != nil {
		return false, err
	}
	if user == "" || user == mcpauth.Service {
		return false, fmt.Errorf("revoke %q: %w", user, mcpauth.ErrNotConnected)
	}
	return c.auth.Revoke(ctx, mcpauth.Identity{Server: cfg.Name, User: user})
}

// Connect makes user's connection to server, as a call of theirs would
// (mcpauth.Broker.Connect): prompter shows them the authorization URL,
// and the bot's callback completes it, on any replica. It returns once connected
// (at once if they are), or when the request expires (mcp.ConnectWait).
func (c *Connections) Connect(ctx context.Context, user, server string, prompter mcpauth.Prompter) error {
	cfg, err := c.personal(server)
	if err != nil {
		return err
	}
	if user == "" || user == mcpauth.Service {
		return fmt.Errorf("connect %q: %w", user, mcpauth.ErrNotConnected)
	}
	ctx, cancel := context.WithTimeout(ctx, mcp.ConnectWait)
	defer cancel()
	return c.auth.Connect(ctx, cfg, mcpauth.Identity{Server: cfg.Name, User: user}, prompter)
}
