package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
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
	env := []string{"BOT_POLICY=" + policy, "PATH=" + os.Getenv("PATH")}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"tools"}, env, nil, &out, &errOut); err != nil {
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

// A server that writes its tools' arguments behind a top-level $ref
// (into $defs or definitions), or as an anyOf or oneOf of such refs, gets
// the same arguments listed by `bot tools` as the model is offered, not
// "-".
func TestToolsCommandShowsArgumentsBehindRefs(t *testing.T) {
	t.Parallel()
	srv := sdk.NewServer(&sdk.Implementation{Name: "typed", Version: "1"}, nil)
	schemas := map[string]string{
		"ticket": `{"type":"object","$ref":"#/$defs/Ticket","$defs":{"Ticket":{"type":"object",
			"properties":{"title":{"type":"string"},"body":{"type":"string"}},"required":["title"]}}}`,
		"notify": `{"type":"object","anyOf":[{"$ref":"#/definitions/Email"},{"$ref":"#/definitions/Chat"}],"definitions":{
			"Email":{"type":"object","properties":{"to":{"type":"string"},"text":{"type":"string"}},"required":["to","text"]},
			"Chat":{"type":"object","properties":{"channel":{"type":"string"},"text":{"type":"string"}},"required":["channel","text"]}}}`,
		"page": `{"type":"object","oneOf":[{"$ref":"#/$defs/ByID"},{"$ref":"#/$defs/ByName"}],"$defs":{
			"ByID":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]},
			"ByName":{"$ref":"#/$defs/Named"},
			"Named":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}}`,
	}
	for name, schema := range schemas {
		srv.AddTool(&sdk.Tool{Name: name, Description: "A typed tool.", InputSchema: json.RawMessage(schema)},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil
			})
	}
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("mcp_servers:\n  typed:\n    url: "+hs.URL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"BOT_POLICY=" + policy, "PATH=" + os.Getenv("PATH")}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"tools"}, env, nil, &out, &errOut); err != nil {
		t.Fatalf("bot tools: %v\n%s", err, errOut.String())
	}
	args := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		// TOOL  SOURCE (three words)  ARGUMENTS...  RULE
		f := strings.Fields(l)
		if i := slices.Index(f, "approval:"); i > 4 && f[1] == "mcp" {
			args[f[0]] = strings.Join(f[4:i], " ")
		}
	}
	want := map[string]string{
		"typed__ticket": "title* body",
		"typed__notify": "text* channel to", // required only where every branch requires it
		"typed__page":   "id name",
	}
	for tool, w := range want {
		if args[tool] != w {
			t.Errorf("bot tools shows the arguments of %s as %q, want %q\n%s", tool, args[tool], w, out.String())
		}
	}
}
