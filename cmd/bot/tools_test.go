package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestToolsCommand(t *testing.T) {
	t.Parallel()
	needs(t, "Node's npx (an MCP server from npm)")
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Fatalf("npx not found (%v): install Node (apt-get install nodejs npm) or run `make test`", err)
	}
	node, _ := exec.LookPath("node")
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	err = os.WriteFile(policy, []byte(`mcp_servers:
  everything:
    command: [`+npx+`, -y, "@modelcontextprotocol/server-everything"]
    approvers: [U0BOB]
    expires_after: 4h
  broken:
    command: [`+node+`, -e, "console.error('missing API key'); process.exit(2)"]
tools:
  http_request: {allow_hosts: [api.example.com]}
  everything__echo: {approval: never}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"BOT_POLICY": policy, "PATH": os.Getenv("PATH")}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"tools"}, func(k string) string { return env[k] }, nil, &out, &errOut); err != nil {
		t.Fatalf("bot tools: %v\n%s", err, errOut.String())
	}
	lines := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	tests := []struct{ tool, want string }{
		{"everything__echo", "mcp everything: echo"},
		{"everything__echo", "message*"},
		{"everything__echo", "approval: never"},
		{"everything__get-sum", "a* b*"},
		{"everything__get-sum", "approval: required, approvers: U0BOB, expires_after: 4h"},
		{"http_request", "built-in"},
		{"http_request", "allow_hosts: api.example.com"},
	}
	for _, tt := range tests {
		if !strings.Contains(lines[tt.tool], tt.want) {
			t.Errorf("bot tools line of %s = %q, want %q in it\n%s", tt.tool, lines[tt.tool], tt.want, out.String())
		}
	}
	if !strings.Contains(out.String(), "MCP server broken is down") || !strings.Contains(out.String(), "missing API key") {
		t.Errorf("bot tools = %s, want the broken server reported with its last words", out.String())
	}
}
