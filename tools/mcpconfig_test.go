package tools_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/tools"
)

// issuePolicy is the example of the MCP issue.
const issuePolicy = `mcp_servers:
  everything:                       # a name of your choice: [a-z0-9_-]+
    command: [npx, -y, "@modelcontextprotocol/server-everything"]   # stdio
    env: {API_TOKEN: "${EVERYTHING_TOKEN}"}                          # ${VAR} from the bot's environment
    timeout: 30s                    # per call; default 60s
    trust_annotations: false        # default false, see 4
    approval: required              # the default rule for this server's tools: the same keys as a tool's rule
    approvers: [S0123ABCD]
    expires_after: 4h
  tickets:
    url: https://mcp.example.com/mcp                                  # streamable HTTP
    headers: {Authorization: "Bearer ${TICKETS_TOKEN}"}
    approval: required
tools:
  everything__echo: {approval: never}    # a rule for one tool overrides its server's
`

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParsePolicyMCPServers(t *testing.T) {
	t.Parallel()
	p, err := tools.ParsePolicyEnv([]byte(issuePolicy), env("EVERYTHING_TOKEN", "tok-1", "TICKETS_TOKEN", "tok-2"))
	if err != nil {
		t.Fatalf("ParsePolicyEnv(issue example) = %v", err)
	}
	rule := tools.DefaultRule()
	rule.Approvers, rule.ExpiresAfter = []string{"S0123ABCD"}, 4*time.Hour
	want := map[string]tools.MCPServer{
		"everything": {
			Name:    "everything",
			Command: []string{"npx", "-y", "@modelcontextprotocol/server-everything"},
			Env:     map[string]string{"API_TOKEN": "tok-1"},
			Timeout: 30 * time.Second,
			Rule:    rule,
		},
		"tickets": {
			Name:    "tickets",
			URL:     "https://mcp.example.com/mcp",
			Headers: map[string]string{"Authorization": "Bearer tok-2"},
			Timeout: tools.DefaultMCPTimeout,
			Rule:    tools.DefaultRule(),
		},
	}
	for _, tt := range []struct {
		yaml string
		want tools.MCPTransport
	}{
		{"mcp_servers:\n  a:\n    url: http://h/sse\n    transport: sse\n", tools.MCPSSE},
		{"mcp_servers:\n  a:\n    url: http://h/mcp\n    transport: streamable_http\n", tools.MCPStreamableHTTP},
	} {
		p, err := tools.ParsePolicyEnv([]byte(tt.yaml), env())
		if err != nil {
			t.Errorf("ParsePolicyEnv(%q) = %v", tt.yaml, err)
		} else if got := p.MCPServers["a"].Transport; got != tt.want {
			t.Errorf("ParsePolicyEnv(%q): transport %q, want %q", tt.yaml, got, tt.want)
		}
	}
	got := map[string]tools.MCPServer{}
	for name, s := range p.MCPServers {
		s.Secrets = tools.Secrets{} // see TestMCPServerSecrets
		got[name] = s
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MCPServers = %+v\nwant %+v", got, want)
	}
	tests := []struct {
		tool string
		want tools.Rule
		ok   bool
	}{
		{"everything__echo", func() tools.Rule { r := tools.DefaultRule(); r.Approval = tools.ApprovalNever; return r }(), true},
		{"everything__add", rule, true},
		{"tickets__create", tools.DefaultRule(), true},
		{"other__x", tools.Rule{}, false},
		{"http_request", tools.Rule{}, false},
	}
	for _, tt := range tests {
		got, ok := p.RuleFor(tt.tool)
		if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("RuleFor(%q) = %+v, %v; want %+v, %v", tt.tool, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParsePolicyMCPServerErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", "mcp_servers:\n  a:\n    command: [x]\n    comand: [y]\n", `line 4: unknown key "comand" in MCP server "a"`},
		{"bad name", "mcp_servers:\n  A_B:\n    command: [x]\n", `line 2: mcp_servers: "A_B" is not a server name`},
		{"double underscore", "mcp_servers:\n  a__b:\n    command: [x]\n", `line 2: mcp_servers: "a__b" is not a server name`},
		{"neither command nor url", "mcp_servers:\n  a:\n    timeout: 5s\n", `line 3: MCP server "a": want exactly one of command:`},
		{"both", "mcp_servers:\n  a:\n    command: [x]\n    url: http://h/mcp\n", `want exactly one of`},
		{"env on url", "mcp_servers:\n  a:\n    url: http://h/mcp\n    env: {A: b}\n", `env: applies only to a command: server`},
		{"empty command", "mcp_servers:\n  a:\n    command: []\n", `line 3: MCP server "a": command: want a program`},
		{"transport on command", "mcp_servers:\n  a:\n    command: [x]\n    transport: sse\n", `transport: applies only to a url: server`},
		{"unknown transport", "mcp_servers:\n  a:\n    url: http://h/sse\n    transport: websocket\n", `line 4: MCP server "a": transport: want streamable_http or sse`},
		{"oauth over sse", "mcp_servers:\n  a:\n    url: http://h/sse\n    transport: sse\n    auth: service\n", `auth: and oauth: apply only to streamable HTTP, not to transport: sse`},
		{"bad url", "mcp_servers:\n  a:\n    url: ftp://h/x\n", `line 3: MCP server "a": url: want an http:// or https:// URL`},
		{"unset variable", "mcp_servers:\n  a:\n    command: [x]\n    env: {T: \"${NOPE}\"}\n", `line 4: MCP server "a": env: T: environment variable NOPE is not set`},
		{"allow_hosts", "mcp_servers:\n  a:\n    command: [x]\n    allow_hosts: [h]\n", `unknown key "allow_hosts"`},
		{"bad approval", "mcp_servers:\n  a:\n    command: [x]\n    approval: maybe\n", `line 4: MCP server "a": approval:`},
		{"bad timeout", "mcp_servers:\n  a:\n    command: [x]\n    timeout: soon\n", `line 4: MCP server "a": timeout:`},
		{"decisions without approve", "mcp_servers:\n  a:\n    command: [x]\n    decisions: [reject]\n", `line 4: MCP server "a": decisions: the list must include approve`},
		{"quorum larger than the approvers", "mcp_servers:\n  a:\n    command: [x]\n    approvers: [U1]\n    approvals_required: 2\n",
			`line 5: MCP server "a": approvals_required: 2 approvals are required but approvers lists 1 person`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tools.ParsePolicyEnv([]byte(tt.yaml), env())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParsePolicyEnv(%q) = %v, want an error containing %q", tt.yaml, err, tt.want)
			}
		})
	}
}

// A server's rule takes the quorum and decision keys of a tool's rule.
func TestMCPServerQuorum(t *testing.T) {
	t.Parallel()
	y := "mcp_servers:\n  a:\n    command: [x]\n    approvers: [S0OPS]\n    approvals_required: 2\n    decisions: [approve, reject]\n    confirm: true\n"
	p, err := tools.ParsePolicyEnv([]byte(y), env())
	if err != nil {
		t.Fatal(err)
	}
	r, ok := p.RuleFor("a__tool")
	if !ok || r.Required() != 2 || r.Offers(tools.DecisionEdit) || !r.Confirm {
		t.Errorf("RuleFor(a__tool) = %+v, %v; want 2 approvals, no edit, confirm", r, ok)
	}
}

func TestExpandEnvDefaults(t *testing.T) {
	t.Parallel()
	y := "mcp_servers:\n  a:\n    command: [x, \"${DIR:-/tmp}\", \"$${NOT}\"]\n    env: {EMPTY: \"${E:-}\", SET: \"a${V}b\"}\n"
	p, err := tools.ParsePolicyEnv([]byte(y), env("V", "1"))
	if err != nil {
		t.Fatal(err)
	}
	s := p.MCPServers["a"]
	if want := []string{"x", "/tmp", "${NOT}"}; !reflect.DeepEqual(s.Command, want) {
		t.Errorf("Command = %q, want %q", s.Command, want)
	}
	if want := map[string]string{"EMPTY": "", "SET": "a1b"}; !reflect.DeepEqual(s.Env, want) {
		t.Errorf("Env = %q, want %q", s.Env, want)
	}
}

func TestMCPServerInheritEnvAndUser(t *testing.T) {
	t.Parallel()
	y := "mcp_servers:\n  a:\n    command: [x]\n    inherit_env: [HTTPS_PROXY, NODE_EXTRA_CA_CERTS]\n    user: mcp-a\n"
	p, err := tools.ParsePolicyEnv([]byte(y), env())
	if err != nil {
		t.Fatal(err)
	}
	s := p.MCPServers["a"]
	if want := []string{"HTTPS_PROXY", "NODE_EXTRA_CA_CERTS"}; !reflect.DeepEqual(s.InheritEnv, want) || s.User != "mcp-a" {
		t.Errorf("InheritEnv, User = %q, %q; want %q, mcp-a", s.InheritEnv, s.User, want)
	}
}

// Every way of handing a server one of the bot's own secrets is refused
// at start-up, with the line and the server.
func TestMCPServerNeverGetsBotSecrets(t *testing.T) {
	t.Parallel()
	getenv := env("SLACK_SIGNING_SECRET", "8f2e-signing-secret", "SLACK_BOT_TOKEN", "xoxb-123-456", "COPY", "xoxb-123-456",
		"REDIS_URL", "redis://:hunter22@redis:6379/0")
	tests := []struct {
		name, yaml, want string
	}{
		{"inherit_env", "mcp_servers:\n  a:\n    command: [x]\n    inherit_env:\n      - HOME_DIR\n      - SLACK_SIGNING_SECRET\n",
			`line 6: MCP server "a": inherit_env: SLACK_SIGNING_SECRET: a tool server is never given the bot's own secrets`},
		{"inherit_env, flow list", "mcp_servers:\n  a:\n    command: [x]\n    inherit_env: [REDIS_URL]\n",
			`line 4: MCP server "a": inherit_env: REDIS_URL: a tool server`},
		{"env copies it", "mcp_servers:\n  a:\n    command: [x]\n    env:\n      X: ${SLACK_BOT_TOKEN}\n",
			`line 5: MCP server "a": env: ${SLACK_BOT_TOKEN}: a tool server is never given the bot's own secrets`},
		{"env copies it with a default", "mcp_servers:\n  a:\n    command: [x]\n    env: {X: \"k=${OPENAI_API_KEY:-none}\"}\n",
			`line 4: MCP server "a": env: ${OPENAI_API_KEY}: a tool server`},
		{"an argument", "mcp_servers:\n  a:\n    command: [x, --token, \"${SLACK_APP_TOKEN:-}\"]\n",
			`line 3: MCP server "a": command: ${SLACK_APP_TOKEN}: a tool server`},
		{"a header", "mcp_servers:\n  a:\n    url: http://h/mcp\n    headers: {Authorization: \"Bearer ${SLACK_BOT_TOKEN}\"}\n",
			`line 4: MCP server "a": headers: ${SLACK_BOT_TOKEN}: a tool server`},
		{"the url", "mcp_servers:\n  a:\n    url: \"http://h/mcp?k=${OPENAI_API_KEY:-}\"\n", `line 3: MCP server "a": url: ${OPENAI_API_KEY}: a tool server`},
		{"the value under another name", "mcp_servers:\n  a:\n    command: [x]\n    env: {T: \"${COPY}\"}\n",
			`line 3: MCP server "a": a setting holds the value of SLACK_BOT_TOKEN: a tool server`},
		{"the value written out", "mcp_servers:\n  a:\n    command: [x, \"--secret=8f2e-signing-secret\"]\n",
			`MCP server "a": a setting holds the value of SLACK_SIGNING_SECRET`},
		{"user root", "mcp_servers:\n  a:\n    command: [x]\n    user: root\n", `line 4: MCP server "a": user: a server never runs as root`},
		{"user 0", "mcp_servers:\n  a:\n    command: [x]\n    user: \"000\"\n", `a server never runs as root`},
		{"user on url", "mcp_servers:\n  a:\n    url: http://h/mcp\n    user: nobody\n", `user: applies only to a command: server`},
		{"inherit_env on url", "mcp_servers:\n  a:\n    url: http://h/mcp\n    inherit_env: [A]\n", `inherit_env: applies only to a command: server`},
		{"inherit_env bad name", "mcp_servers:\n  a:\n    command: [x]\n    inherit_env: [\"A=B\"]\n", `line 4: MCP server "a": inherit_env: "A=B" is not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tools.ParsePolicyEnv([]byte(tt.yaml), getenv)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParsePolicyEnv(%q) = %v, want an error containing %q", tt.yaml, err, tt.want)
			}
			if strings.Contains(tt.want, "bot's own secrets") || strings.Contains(tt.want, "a tool server") {
				if !errors.Is(err, tools.ErrBotSecret) {
					t.Errorf("error %v does not wrap ErrBotSecret", err)
				}
				for _, v := range []string{"8f2e-signing-secret", "xoxb-123-456", "hunter22"} {
					if strings.Contains(err.Error(), v) {
						t.Errorf("error %v shows the secret", err)
					}
				}
			}
		})
	}
}

func FuzzParseMCPServers(f *testing.F) {
	f.Add(issuePolicy)
	f.Add(designPolicy)
	f.Add("mcp_servers:\n  a:\n    url: http://h/${X:-y}\n")
	f.Add("mcp_servers:\n  a:\n    url: http://h${TICKETS_TOKEN}/x${EVERYTHING_TOKEN}y?k=1\n  b:\n    command: [x, \"-t=${TICKETS_TOKEN}\"]\n")
	f.Add("mcp_servers:\n  a:\n    command: [x, \"${SLACK_BOT_TOKEN:-}\"]\n    inherit_env: [PATH]\n    user: nobody\n")
	f.Add("mcp_servers:\n  a:\n    command: [x]\n    env: {A: \"${COPY}\"}\n")
	f.Add("mcp_servers:\n  a:\n    url: https://h/mcp\n    auth: requester\n    oauth: {client_id: c, client_secret: \"${TICKETS_TOKEN}\", scopes: [a, b]}\n")
	f.Add("mcp_servers:\n  a:\n    url: https://h/mcp\n    auth: service\n    oauth: {client_id: c, client_secret: \"${COPY}\", grant: client_credentials}\n")
	const botSecret = "xoxb-fuzz-secret"
	f.Fuzz(func(t *testing.T, y string) {
		secrets := []string{"tok-everything-1", "tok-tickets-2"}
		p, err := tools.ParsePolicyEnv([]byte(y), env("EVERYTHING_TOKEN", secrets[0], "TICKETS_TOKEN", secrets[1],
			"SLACK_BOT_TOKEN", botSecret, "COPY", botSecret))
		if err != nil {
			return
		}
		other, _ := tools.ParsePolicyEnv([]byte(y), env("EVERYTHING_TOKEN", "zz-other-1", "TICKETS_TOKEN", "zz-other-2"))
		for name, s := range p.MCPServers {
			if (len(s.Command) > 0) == (s.URL != "") {
				t.Errorf("server %q: command %q and url %q", name, s.Command, s.URL)
			}
			// No server that parses is given the bot's secret.
			all := append(append(append([]string{s.URL, s.User, s.OAuth.ClientID, s.OAuth.ClientSecret, s.OAuth.ClientMetadataURL}, s.Command...), s.InheritEnv...), fmt.Sprint(s.Env), fmt.Sprint(s.Headers))
			for _, v := range all {
				if strings.Contains(v, botSecret) {
					t.Errorf("server %q is given the bot's token: %q", name, v)
				}
			}
			if slices.Contains(s.InheritEnv, "SLACK_BOT_TOKEN") {
				t.Errorf("server %q inherits SLACK_BOT_TOKEN", name)
			}
			// What came from the environment is not shown: a secret shows
			// only where the file itself spells it, whatever the
			// environment holds.
			if other == nil {
				continue
			}
			for _, secret := range secrets {
				if shown := s.Shown(); strings.Contains(shown, secret) && !strings.Contains(other.MCPServers[name].Shown(), secret) {
					t.Errorf("server %q is shown as %q, with %q", name, shown, secret)
				}
			}
		}
	})
}

// What came from the environment, a URL's password and query, and env:
// and headers: values are hidden wherever a server's configuration is
// shown, and in errors that quote it.
func TestMCPServerSecrets(t *testing.T) {
	t.Parallel()
	y := `mcp_servers:
  tickets:
    url: "https://bot:hunter22@${MCP_HOST}/mcp/${MCP_PATH}?api_key=${MCP_KEY}&region=eu&debug#frag"
    headers: {Authorization: "Bearer ${TICKETS_TOKEN}", X-Team: "payments-team"}
  local:
    command: [tool, --port, "${PORT}", "--token=${LOCAL_TOKEN}", "${DIR:-/srv/data}", plain]
    env: {API_TOKEN: "${EVERYTHING_TOKEN}"}
`
	p, err := tools.ParsePolicyEnv([]byte(y), env("MCP_HOST", "mcp.internal", "MCP_PATH", "p", "MCP_KEY", "k-3xyz",
		"TICKETS_TOKEN", "tok-2abc", "PORT", "81", "LOCAL_TOKEN", "loc-9", "EVERYTHING_TOKEN", "tok-1abc"))
	if err != nil {
		t.Fatal(err)
	}
	tickets, local := p.MCPServers["tickets"], p.MCPServers["local"]
	if want := "https://mcp.internal/mcp/p?api_key=k-3xyz&region=eu&debug#frag"; !strings.HasSuffix(tickets.URL, want[len("https://"):]) {
		t.Fatalf("URL = %q, want the expanded URL", tickets.URL)
	}
	m := tools.Masked
	tests := []struct{ what, got, want string }{
		{"url", tickets.Shown(), "https://bot:" + m + "@" + m + "/mcp/" + m + "?api_key=" + m + "&region=" + m + "&" + m + "#" + m},
		{"command", local.Shown(), "tool --port " + m + " --token=" + m + " /srv/data plain"},
		// net/http quotes the whole URL in its errors.
		{"error quoting the url", tickets.Secrets.Redact(`Post "` + tickets.URL + `": dial tcp 10.0.0.1:443: connect: connection refused`),
			`Post "https://bot:` + m + "@" + m + "/mcp/" + m + "?api_key=" + m + "&region=" + m + "&" + m + "#" + m + `": dial tcp 10.0.0.1:443: connect: connection refused`},
		{"error naming the host", tickets.Secrets.Redact("lookup mcp.internal: no such host"), "lookup " + m + ": no such host"},
		{"a header value", tickets.Secrets.Redact("401: token tok-2abc refused for payments-team"), "401: token " + m + " refused for " + m},
		{"the bearer header", tickets.Secrets.Redact("sent Bearer tok-2abc"), "sent " + m},
		{"an argument", local.Secrets.Redact("usage: tool --token=loc-9 --port 81: bad flag"), "usage: tool --token=" + m + " --port 81: bad flag"},
		{"an environment value", local.Secrets.Redact("API_TOKEN=tok-1abc is expired"), "API_TOKEN=" + m + " is expired"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.what, tt.got, tt.want)
		}
	}
}

// A URL holds no character that would end it in an error's text, so that
// redaction finds all of it there.
func TestMCPServerURLCharacters(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"http://h/mcp?k=a b", `http://h/mcp?k="x"`, "http://h/mcp?k=<x>", "http://h/mcp?k=`x`", "http://h/mcp?k=${V}"} {
		y := fmt.Sprintf("mcp_servers:\n  a:\n    url: %q\n", u)
		if _, err := tools.ParsePolicyEnv([]byte(y), env("V", "a b")); err == nil || !strings.Contains(err.Error(), "want an http:// or https:// URL") {
			t.Errorf("url: %s: %v, want refused", u, err)
		}
	}
}

func TestMCPServerSelfAlias(t *testing.T) {
	t.Parallel()
	_, _ = tools.ParsePolicyEnv([]byte("mcp_servers:\n  a:\n    command: &c [x, *c]\n"), env())
	_, _ = tools.ParsePolicyEnv([]byte("mcp_servers:\n  a:\n    command: [x]\n    env: &e {A: *e}\n"), env())
}
