package bot

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/internal/settingurl"
	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// CallbackPath is the path of the bot's OAuth callback, where the
// authorization servers of MCP servers send people back.
const CallbackPath = "/oauth/callback"

// RedirectURL is the bot's OAuth callback as browsers reach it:
// BOT_PUBLIC_URL (the bot's public base URL) or, without it, BOT_ADDR's.
func RedirectURL(getenv func(string) string) string {
	base := strings.TrimRight(getenv("BOT_PUBLIC_URL"), "/")
	if base == "" {
		addr := getenv("BOT_ADDR")
		if addr == "" {
			addr = "127.0.0.1:3000"
		}
		if strings.HasPrefix(addr, ":") {
			addr = "127.0.0.1" + addr
		}
		base = "http://" + addr
	}
	return base + CallbackPath
}

// checkPublicURL refuses a BOT_PUBLIC_URL that cannot be the base of the
// OAuth callback: authorization servers would send browsers to a broken
// address, and the sign-in would fail only then, in a person's browser.
// It quotes nothing of the value.
func checkPublicURL(getenv func(string) string) error {
	raw := getenv("BOT_PUBLIC_URL")
	if raw == "" {
		return nil
	}
	u, why := settingurl.Problem(raw)
	switch {
	case why != "":
	case u.User != nil:
		why = "it holds a user name or password, which browsers are not to be sent"
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		why = "it has a query (?…) or fragment (#…): " + CallbackPath + " is appended to it"
	default:
		return nil
	}
	return fmt.Errorf("BOT_PUBLIC_URL: %s; want the bot's base URL as browsers reach it, e.g. https://countersign.example.com", why)
}

// WarnCallbackFromAddr warns, for a bot that serves Slack, when an MCP
// server of the policy has people connect their own accounts
// (auth: requester, from a link in Slack) and BOT_PUBLIC_URL is unset:
// their browsers are then sent back to BOT_ADDR's callback, which they
// reach only from the bot's machine or network.
func WarnCallbackFromAddr(getenv func(string) string, policy *tools.Policy, log logrus.FieldLogger) {
	if getenv("BOT_PUBLIC_URL") != "" || policy == nil {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(policy.MCPServers)) {
		if s := policy.MCPServers[name]; s.Auth == tools.AuthRequester {
			log.WithFields(logrus.Fields{"server": s.Name, "callback": RedirectURL(getenv)}).Warn(
				"BOT_PUBLIC_URL is not set: people who connect their accounts to this MCP server are sent back to a callback made from BOT_ADDR; " +
					"set BOT_PUBLIC_URL to the bot's public base URL if their browsers reach it at another address")
			return
		}
	}
}

// NewBroker is the keeper of the MCP servers' OAuth connections, in the
// store, sealed with MCP_TOKEN_KEY. Without that variable a key is made
// for this process, and a warning says so when a server uses OAuth:
// connections made with it open only in this process.
func NewBroker(getenv func(string) string, log logrus.FieldLogger, store *redisstore.Store, policy *tools.Policy) (*mcpauth.Broker, error) {
	if err := checkPublicURL(getenv); err != nil {
		return nil, err
	}
	key, generated, err := tokenKey(getenv)
	if err != nil {
		return nil, err
	}
	if generated {
		for _, s := range policy.MCPServers {
			if s.Auth != tools.AuthStatic {
				log.Warn("MCP_TOKEN_KEY is not set: OAuth tokens are sealed with a key made for this process; connections are lost at restart and other replicas cannot open them (set MCP_TOKEN_KEY to 32 random bytes, base64)")
				break
			}
		}
	}
	return mcpauth.New(store, key, mcpauth.Options{RedirectURL: RedirectURL(getenv), StateTTL: mcp.ConnectWait, Logger: log.WithField("component", "mcpauth")})
}

// tokenKey is mcpauth.KeyFromEnv, with a bad MCP_TOKEN_KEY refused in
// words that say how to make a good one.
func tokenKey(getenv func(string) string) (key []byte, generated bool, err error) {
	key, generated, err = mcpauth.KeyFromEnv(getenv)
	if errors.Is(err, mcpauth.ErrBadKey) {
		err = fmt.Errorf("%w: make one with `openssl rand -base64 32`, and give every replica and bot mcp the same", err)
	}
	return key, generated, err
}
