package tools

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// DefaultMCPTimeout caps one call to an MCP server's tool when the policy
// does not say.
const DefaultMCPTimeout = 60 * time.Second

// MCPServer is one entry of the policy file's mcp_servers: section: how to
// reach an MCP server, and the default rule of its tools.
//
//	mcp_servers:
//	  everything:                  # the name: [a-z0-9_-]+, without "__"
//	    command: [npx, -y, "@modelcontextprotocol/server-everything"]
//	    env: {API_TOKEN: "${EVERYTHING_TOKEN}"}
//	    inherit_env: [HTTPS_PROXY]   # more of the bot's variables, by name
//	    user: mcp-everything       # when the bot runs as root; default nobody
//	    timeout: 30s               # per call; default 60s
//	    trust_annotations: false   # default false
//	    approval: required         # the keys of a tool's rule
//	  tickets:
//	    url: https://mcp.example.com/mcp
//	    headers: {Authorization: "Bearer ${TICKETS_TOKEN}"}
//	  legacy:
//	    url: https://old.example.com/sse
//	    transport: sse             # the 2024-11-05 HTTP+SSE transport
//
// Exactly one of command (a stdio server, started by the bot) and url (an
// HTTP server: streamable HTTP, or with transport: sse the older HTTP+SSE
// transport) is set. ${VAR} in command, env, url and headers
// is replaced with the bot's environment variable VAR; a variable that is
// not set is an error, unless written ${VAR:-default}.
//
// A stdio server's environment is a short list of the bot's variables
// (see the mcp package), the ones named in inherit_env, and env. None of
// them, nor its command or an HTTP server's url and headers, may carry one
// of the bot's own secrets (BotSecretEnv): naming one in inherit_env,
// writing ${NAME} of one, or a value that contains one is an error
// wrapping ErrBotSecret. user is the account a stdio server runs as when
// the bot runs as root (a name or a number, never root).
//
// A server's tools are offered as <server>__<tool>. The rule of such a tool
// is its own entry under tools:, else the server's Rule. With
// trust_annotations: true, a tool the server marks readOnlyHint needs no
// approval unless it has its own entry, and readOnlyHint or
// idempotentHint lets a call cut off by a crash run again.
type MCPServer struct {
	// Name is the key in mcp_servers:.
	Name string
	// Command is the program and arguments of a stdio server.
	Command []string
	// Env is added to the stdio server's environment (values expanded).
	Env map[string]string
	// InheritEnv names more of the bot's environment variables that a
	// stdio server is given, when they are set.
	InheritEnv []string
	// User is the account a stdio server runs as when the bot runs as
	// root; empty means the default (nobody).
	User string
	// URL is the endpoint of an HTTP server: where streamable HTTP
	// posts, or where the HTTP+SSE transport opens its event stream.
	URL string
	// Transport is how a url: server is spoken to: MCPSSE, or
	// MCPStreamableHTTP (also when empty).
	Transport MCPTransport
	// Headers are sent with every HTTP request (values expanded). They
	// may hold secrets: never log them.
	Headers map[string]string
	// Timeout caps one tool call.
	Timeout time.Duration
	// TrustAnnotations lets the server's tool annotations set defaults.
	TrustAnnotations bool
	// Rule is the rule of the server's tools that have no entry of their
	// own under tools:.
	Rule Rule
	// Auth says whose identity the calls run as (auth:); OAuth is how
	// the bot is known to the server's authorization server (oauth:). See
	// MCPOAuth.
	Auth  MCPAuth
	OAuth MCPOAuth
	// Secrets are the server's env: and headers: values and the parts of
	// its command and URL that came from ${VAR}: whatever shows the
	// server's configuration, or an error or output of it, shows it
	// through Secrets.Redact.
	Secrets Secrets
}

// Shown is the server's URL, or its command, as people and logs may see
// it (Secrets.Redact).
func (s MCPServer) Shown() string {
	if s.URL != "" {
		return s.Secrets.Redact(s.URL)
	}
	args := make([]string, len(s.Command))
	for i, arg := range s.Command {
		args[i] = s.Secrets.Redact(arg)
		if arg == "" || strings.ContainsAny(arg, " \t\n\"'") {
			args[i] = strconv.Quote(args[i])
		}
	}
	return strings.Join(args, " ")
}

// MCPTransport is the HTTP transport of a url: server (transport:).
type MCPTransport string

const (
	// MCPStreamableHTTP is the transport of the MCP specification since
	// 2025-03-26: every message is a POST to the URL.
	MCPStreamableHTTP MCPTransport = "streamable_http"
	// MCPSSE is the HTTP+SSE transport of the 2024-11-05 specification,
	// which many servers still speak: a GET of the URL opens an event
	// stream whose first event names where to POST messages.
	MCPSSE MCPTransport = "sse"
)

func parseMCPTransport(n *yaml.Node) (MCPTransport, error) {
	if n.Kind == yaml.ScalarNode {
		switch t := MCPTransport(n.Value); t {
		case MCPStreamableHTTP, MCPSSE:
			return t, nil
		}
	}
	return "", fmt.Errorf("want %s or %s", MCPStreamableHTTP, MCPSSE)
}

// MCPToolSeparator joins a server's name and its tool's name.
const MCPToolSeparator = "__"

var mcpServerNamePattern = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// mcpServerFor returns the MCP server whose tools' names start with
// name's prefix, if any.
func (p *Policy) mcpServerFor(name string) (MCPServer, bool) {
	server, _, ok := strings.Cut(name, MCPToolSeparator)
	if !ok {
		return MCPServer{}, false
	}
	s, ok := p.MCPServers[server]
	return s, ok
}

var mcpServerKeys = append([]string{"command", "env", "inherit_env", "user", "url", "transport", "headers", "timeout", "trust_annotations", "auth", "oauth"},
	slices.DeleteFunc(slices.Clone(ruleKeys), func(k string) bool { return k == "allow_hosts" })...)

func parseMCPServers(n *yaml.Node, getenv func(string) string, out map[string]MCPServer) error {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return lineErrorf(n, "mcp_servers: want a mapping of server names to settings")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], resolve(n.Content[i+1])
		name := key.Value
		if key.Kind != yaml.ScalarNode || !mcpServerNamePattern.MatchString(name) || strings.Contains(name, MCPToolSeparator) {
			return lineErrorf(key, "mcp_servers: %q is not a server name: want 1 to 32 of a-z, 0-9, _ and -, without __", name)
		}
		if _, dup := out[name]; dup {
			return lineErrorf(key, "MCP server %q is listed twice", name)
		}
		s, err := parseMCPServer(name, val, getenv)
		if err != nil {
			return err
		}
		out[name] = s
	}
	return nil
}

func parseMCPServer(name string, n *yaml.Node, getenv func(string) string) (MCPServer, error) {
	s := MCPServer{Name: name, Timeout: DefaultMCPTimeout, Rule: DefaultRule()}
	if n.Kind != yaml.MappingNode {
		return s, lineErrorf(n, "MCP server %q: want a mapping with command: or url:", name)
	}
	where := fmt.Sprintf(" in MCP server %q", name)
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], resolve(n.Content[i+1])
		if err := checkKey(key, seen, where, slices.Concat(mcpServerKeys, decisionRuleKeys)); err != nil {
			return s, err
		}
		var err error
		switch key.Value {
		case "command":
			var cmd []string
			if cmd, err = stringList(val); err == nil {
				if len(cmd) == 0 {
					err = errors.New("want a program and its arguments, e.g. [npx, -y, some-server]")
				}
				for _, arg := range cmd {
					var x string
					var fromEnv []Span
					if x, fromEnv, err = expandEnv(arg, getenv); err != nil {
						break
					}
					s.Command = append(s.Command, x)
					s.Secrets.AddExpanded(x, fromEnv)
				}
			}
		case "env":
			s.Env, err = expandedMap(val, getenv, &s.Secrets)
		case "inherit_env":
			if s.InheritEnv, err = parseInheritEnv(name, val); errors.Is(err, ErrBotSecret) {
				return s, err
			}
		case "user":
			s.User, err = parseServerUser(val)
		case "url":
			s.URL, err = parseMCPURL(val, getenv, &s.Secrets)
		case "transport":
			s.Transport, err = parseMCPTransport(val)
		case "headers":
			s.Headers, err = expandedMap(val, getenv, &s.Secrets)
		case "timeout":
			s.Timeout, err = parseExpiresAfter(val)
		case "trust_annotations":
			err = parseBool(val, &s.TrustAnnotations)
		case "auth":
			s.Auth, err = parseMCPAuth(val)
		case "oauth":
			if err = parseMCPOAuth(name, val, getenv, &s); err != nil {
				return s, err
			}
		case "approval":
			err = parseApproval(val, &s.Rule.Approval)
		case "approvers":
			s.Rule.Approvers, err = parseApprovers(val)
		case "self_approval":
			err = parseBool(val, &s.Rule.SelfApproval)
		case "expires_after":
			s.Rule.ExpiresAfter, err = parseExpiresAfter(val)
		case "approvals_required", "decisions", "confirm":
			err = parseDecisionKey(key.Value, val, &s.Rule)
		default:
			err = parseReach(key.Value, val, &s.Rule.Reach)
		}
		if err != nil {
			return s, lineErrorf(val, "MCP server %q: %s: %v", name, key.Value, err)
		}
	}
	if err := checkQuorum(n, fmt.Sprintf("MCP server %q", name), s.Rule); err != nil {
		return s, err
	}
	if err := checkReach(s.Rule, seen, n, fmt.Sprintf("MCP server %q", name)); err != nil {
		return s, err
	}
	switch {
	case seen["command"] == seen["url"]:
		return s, lineErrorf(n, "MCP server %q: want exactly one of command: (stdio) and url: (streamable HTTP)", name)
	case seen["env"] && !seen["command"]:
		return s, lineErrorf(n, "MCP server %q: env: applies only to a command: server", name)
	case seen["headers"] && !seen["url"]:
		return s, lineErrorf(n, "MCP server %q: headers: applies only to a url: server", name)
	case seen["inherit_env"] && !seen["command"]:
		return s, lineErrorf(n, "MCP server %q: inherit_env: applies only to a command: server", name)
	case seen["user"] && !seen["command"]:
		return s, lineErrorf(n, "MCP server %q: user: applies only to a command: server", name)
	case seen["transport"] && !seen["url"]:
		return s, lineErrorf(n, "MCP server %q: transport: applies only to a url: server", name)
	case s.Transport == MCPSSE && (seen["auth"] || seen["oauth"]):
		// The SDK's HTTP+SSE client has no OAuth; the 2024-11-05
		// specification had no authorization either.
		return s, lineErrorf(n, "MCP server %q: auth: and oauth: apply only to streamable HTTP, not to transport: sse (give a token in headers:)", name)
	}
	if err := checkMCPAuth(n, &s, seen); err != nil {
		return s, err
	}
	if err := refuseBotSecrets(n, s, getenv); err != nil {
		return s, err
	}
	return s, nil
}

// BotSecretEnv are the environment variables that hold the bot's own
// secrets: Slack's tokens and signing secret, the model providers' keys,
// the Redis URL (which holds its password) and the key that seals MCP
// tokens. No tool server is given them, in any form.
var BotSecretEnv = []string{
	"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "SLACK_USER_TOKEN", "SLACK_CLIENT_SECRET",
	"OPENAI_API_KEY", "ANTHROPIC_API_KEY",
	"REDIS_URL", "REDIS_PASSWORD", "MCP_TOKEN_KEY",
}

// IsBotSecretEnv reports whether name is one of BotSecretEnv.
func IsBotSecretEnv(name string) bool {
	return slices.Contains(BotSecretEnv, name)
}

// ErrBotSecret is wrapped by the policy error of an MCP server that would
// be given one of the bot's own secrets.
var ErrBotSecret = errors.New("a tool server is never given the bot's own secrets")

// minSecretMatch is the shortest secret value looked for in a server's
// settings: shorter ones would match by chance.
const minSecretMatch = 8

var envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseInheritEnv reads inherit_env: a name that is one of the bot's
// secrets is an error that names the line and the server already.
func parseInheritEnv(server string, n *yaml.Node) ([]string, error) {
	names, err := stringList(n)
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		if !envNamePattern.MatchString(name) {
			return nil, fmt.Errorf("%q is not an environment variable's name", name)
		}
		if IsBotSecretEnv(name) {
			return nil, lineWrapf(resolve(n.Content[i]), "MCP server %q: inherit_env: %s: %w (give the server a credential of its own, in env:)", server, name, ErrBotSecret)
		}
	}
	return names, nil
}

var userPattern = regexp.MustCompile(`^([a-z_][a-z0-9_.-]{0,31}|[0-9]{1,10})$`)

func parseServerUser(n *yaml.Node) (string, error) {
	if n.Kind != yaml.ScalarNode || !userPattern.MatchString(n.Value) {
		return "", errors.New("want a user's name or number, e.g. nobody")
	}
	if n.Value == "root" || strings.Trim(n.Value, "0") == "" {
		return "", errors.New("a server never runs as root")
	}
	return n.Value, nil
}

// refuseBotSecrets fails when a server's command, env, url or headers
// name one of the bot's secrets as ${VAR}, or hold its value however it
// got there.
func refuseBotSecrets(n *yaml.Node, s MCPServer, getenv func(string) string) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		if key != "command" && key != "env" && key != "url" && key != "headers" && key != "oauth" {
			continue
		}
		var err error
		walkScalars(resolve(n.Content[i+1]), func(v *yaml.Node) {
			for _, m := range envRefPattern.FindAllStringSubmatch(v.Value, -1) {
				if err == nil && IsBotSecretEnv(m[2]) {
					err = lineWrapf(v, "MCP server %q: %s: ${%s}: %w (give the server a credential of its own)", s.Name, key, m[2], ErrBotSecret)
				}
			}
		})
		if err != nil {
			return err
		}
	}
	values := slices.Concat(s.Command, []string{s.URL, s.OAuth.ClientID, s.OAuth.ClientSecret, s.OAuth.PrivateKey, s.OAuth.ClientMetadataURL})
	for _, m := range []map[string]string{s.Env, s.Headers} {
		for _, v := range m {
			values = append(values, v)
		}
	}
	for _, name := range BotSecretEnv {
		secret := getenv(name)
		if len(secret) < minSecretMatch {
			continue
		}
		for _, v := range values {
			if strings.Contains(v, secret) {
				return lineWrapf(n, "MCP server %q: a setting holds the value of %s: %w (give the server a credential of its own)", s.Name, name, ErrBotSecret)
			}
		}
	}
	return nil
}

// lineWrapf is lineErrorf for a format that wraps an error with %w.
func lineWrapf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("line %d: "+format, append([]any{n.Line}, args...)...)
}

// walkScalars calls f with every scalar in n, aliases followed once each
// (an anchor may hold an alias of itself).
func walkScalars(n *yaml.Node, f func(*yaml.Node)) {
	seen := map[*yaml.Node]bool{}
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		n = resolve(n)
		if seen[n] {
			return
		}
		seen[n] = true
		if n.Kind == yaml.ScalarNode {
			f(n)
			return
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
}

// parseMCPURL reads a server's URL. A URL holds no space, control
// character, ", <, > or ` (RFC 3986: they are written %20, %22, …), so
// that in an error that quotes it, Secrets.Redact finds where it ends.
func parseMCPURL(n *yaml.Node, getenv func(string) string, secrets *Secrets) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", errors.New("want an http:// or https:// URL")
	}
	raw, fromEnv, err := expandEnv(n.Value, getenv)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("want an http:// or https:// URL")
	}
	if strings.ContainsFunc(raw, func(r rune) bool { return r < utf8.RuneSelf && endsURL(byte(r)) }) {
		return "", errors.New("want an http:// or https:// URL: write a space, \", <, > and ` as %20, %22, %3C, %3E and %60")
	}
	secrets.AddURL(raw, fromEnv)
	return raw, nil
}

// expandedMap reads a mapping of names to strings, expanding ${VAR}.
// Every value is a secret.
func expandedMap(n *yaml.Node, getenv func(string) string, secrets *Secrets) (map[string]string, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, errors.New("want a mapping, e.g. {NAME: value}")
	}
	out := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.Value == "" || v.Kind != yaml.ScalarNode {
			return nil, errors.New("want a mapping of names to strings")
		}
		if _, dup := out[k.Value]; dup {
			return nil, fmt.Errorf("%q is repeated", k.Value)
		}
		x, fromEnv, err := expandEnv(v.Value, getenv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.Value, err)
		}
		out[k.Value] = x
		secrets.AddExpanded(x, fromEnv)
		secrets.Add(x)
	}
	return out, nil
}

var envRefPattern = regexp.MustCompile(`\$(\$|\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\})`)

// expandEnv replaces ${VAR} and ${VAR:-default} in s, and says which
// parts of the result came from the environment (a default written in
// the file did not). A ${VAR} whose variable is unset or empty is an
// error: a missing token would otherwise reach a server as an empty
// string. "$$" stays as it is.
func expandEnv(s string, getenv func(string) string) (string, []Span, error) {
	var b strings.Builder
	var fromEnv []Span
	at := 0
	for _, m := range envRefPattern.FindAllStringSubmatchIndex(s, -1) {
		b.WriteString(s[at:m[0]])
		at = m[1]
		if s[m[2]:m[3]] == "$" {
			b.WriteByte('$')
			continue
		}
		name := s[m[4]:m[5]]
		if v := getenv(name); v != "" {
			fromEnv = append(fromEnv, Span{b.Len(), b.Len() + len(v)})
			b.WriteString(v)
			continue
		}
		if m[6] < 0 {
			return "", nil, fmt.Errorf("environment variable %s is not set (write ${%s:-} to allow an empty value)", name, name)
		}
		b.WriteString(s[m[8]:m[9]])
	}
	b.WriteString(s[at:])
	return b.String(), fromEnv, nil
}
