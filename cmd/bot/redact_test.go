package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/tools"
)

// An MCP server's url: may hold secrets: a key in its query, a password
// in its user information, parts from ${VAR}; so may its command's
// arguments. With the server down, its error (which quotes the URL, or
// holds what the program wrote to stderr) is shown by the unauthenticated
// /readyz, the warning log and `bot tools`: none of them shows a secret.
func TestServerURLSecretsAreNotShown(t *testing.T) {
	t.Parallel()
	const (
		queryKey    = "tk-query-7f3a9c"   // TICKETS_KEY, in the query
		varPassword = "pw-var-19be44"     // VAULT_PASSWORD, in the user information
		password    = "hunter2-in-a-file" // written in the file
		argToken    = "lt-arg-5d21c0"     // LOCAL_TOKEN, in an argument
	)
	needs(t, "Node (an MCP server)")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found (%v): install Node (apt-get install nodejs npm) or run `make test`", err)
	}
	closed := freeAddr(t) // nothing listens there
	policy := `mcp_servers:
  tickets:
    url: "http://` + closed + `/mcp?api_key=${TICKETS_KEY}&team=payments"
  vault:
    url: "http://bot:${VAULT_PASSWORD}@` + closed + `/mcp"
  legacy:
    url: "http://bot:` + password + `@` + closed + `/mcp/legacy"
  local:
    command: [` + node + `, -e, "console.error('cannot log in with ' + process.argv[1]); process.exit(2)", --, "--token=${LOCAL_TOKEN}"]
tools:
  http_request: {}
`
	h := newHarness(t, "", llmtest.Reply("Hello."))
	h.env = append(h.env, "TICKETS_KEY="+queryKey, "VAULT_PASSWORD="+varPassword, "LOCAL_TOKEN="+argToken)
	h.redeploy(policy)
	// The servers start when the tools are first needed: by a turn.
	h.command("hi", nil, nil)
	h.reply(h.root(1), "Hello.")

	var readyz string
	h.eventually(func() bool {
		resp, err := botClient.Get("http://" + h.addr + "/readyz")
		if err != nil {
			return false
		}
		readyz = readAll(t, resp)
		return strings.Count(readyz, ": down: ") == 4
	}, "/readyz to show the four servers down")
	h.eventually(func() bool {
		return strings.Count(h.logs.String(), "MCP server is down") >= 4
	}, "the warning of each server down")
	out, code := runBot(t, h.env, "", "tools")
	if code != 0 {
		t.Fatalf("bot tools exited %d:\n%s", code, out)
	}
	shown := map[string]string{"/readyz": readyz, "the log": h.logs.String(), "bot tools": out}
	for where, text := range shown {
		for _, secret := range []string{queryKey, varPassword, password, argToken} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %q:\n%s", where, secret, text)
			}
		}
	}
	// What is not secret still helps find the server.
	for _, want := range []string{"mcp tickets: down: ", "connection refused", "/mcp?api_key=" + tools.Masked + "&team=" + tools.Masked,
		"mcp local: down: ", "cannot log in with --token=" + tools.Masked} {
		if !strings.Contains(readyz, want) {
			t.Errorf("/readyz = %q, want %q in it", readyz, want)
		}
	}
	for _, want := range []string{"MCP server vault is down", "(http://bot:" + tools.Masked + "@" + closed + "/mcp)",
		"MCP server local is down", "-- --token=" + tools.Masked + ")"} {
		if !strings.Contains(out, want) {
			t.Errorf("bot tools = %s\nwant %q in it", out, want)
		}
	}
}

// REDIS_URL is shown the same way: the start-up line and the errors
// about it show no password. One that does not parse is not quoted at
// all; one that does is, masked.
func TestRedisURLPasswordIsNotShown(t *testing.T) {
	t.Parallel()
	const password = "s3cr3t pass" // a space: the URL does not parse
	for raw, want := range map[string]string{
		"redis://:" + password + "@127.0.0.1/0":         "REDIS_URL is not a URL",
		"redis://:s3cr3t/pass@127.0.0.1/0":              "REDIS_URL is not a URL",
		"redis://bot:s3cr3t-pass@" + freeAddr(t) + "/0": tools.Masked + "@",
	} {
		out, code := runBot(t, []string{"REDIS_URL=" + raw}, "", "threads", "list")
		if code == 0 || strings.Contains(out, "s3cr3t") || !strings.Contains(out, want) {
			t.Errorf("bot threads list with REDIS_URL=%s exited %d:\n%s\nwant an error without the password (%q)", raw, code, out, want)
		}
	}
}
