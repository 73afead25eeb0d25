package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/tools"
)

// fakeTool is a tool that does nothing, with the schema it is given.
type fakeTool struct {
	name   string
	schema string
}

func (f fakeTool) Name() string                                          { return f.name }
func (f fakeTool) Description() string                                   { return "a test tool" }
func (f fakeTool) Schema() json.RawMessage                               { return json.RawMessage(f.schema) }
func (f fakeTool) Idempotent(json.RawMessage) bool                       { return true }
func (f fakeTool) Call(context.Context, json.RawMessage) (string, error) { return "done", nil }

const objectSchema = `{"type":"object"}`

func names(ts []tools.Tool) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name()
	}
	return out
}

func mustPolicy(t *testing.T, yaml string) *tools.Policy {
	t.Helper()
	p, err := tools.ParsePolicy([]byte(yaml))
	if err != nil {
		t.Fatalf("ParsePolicy(%q) error = %v", yaml, err)
	}
	return p
}

func TestNewRegistryOffersPerPolicy(t *testing.T) {
	t.Parallel()
	all := []tools.Tool{
		fakeTool{"zeta", objectSchema},
		fakeTool{"alpha", objectSchema},
		fakeTool{"http_request", objectSchema},
	}
	tests := []struct {
		name   string
		policy *tools.Policy
		want   string
	}{
		{"nil policy offers all", nil, "alpha,http_request,zeta"},
		{"default policy offers all", tools.DefaultPolicy(), "alpha,http_request,zeta"},
		{"a file offers the listed tools", mustPolicy(t, "tools:\n  zeta: {}\n  alpha: {}\n"), "alpha,zeta"},
		{"an empty file offers none", mustPolicy(t, "tools: {}\n"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := tools.NewRegistry(tt.policy, all...)
			if err != nil {
				t.Fatalf("NewRegistry error = %v", err)
			}
			if got := strings.Join(names(r.Tools()), ","); got != tt.want {
				t.Errorf("Tools() = %s, want %s", got, tt.want)
			}
			for _, name := range []string{"alpha", "http_request", "zeta"} {
				_, _, ok := r.Lookup(name)
				if want := strings.Contains(","+tt.want+",", ","+name+","); ok != want {
					t.Errorf("Lookup(%q) ok = %v, want %v", name, ok, want)
				}
			}
		})
	}
}

func TestRegistryLookupRule(t *testing.T) {
	t.Parallel()
	p := mustPolicy(t, "tools:\n  alpha:\n    approval: never\n    approvers: [U0BOB]\n")
	r, err := tools.NewRegistry(p, fakeTool{"alpha", objectSchema})
	if err != nil {
		t.Fatal(err)
	}
	tool, rule, ok := r.Lookup("alpha")
	if !ok || tool.Name() != "alpha" || rule.Approval != tools.ApprovalNever || rule.Approvers[0] != "U0BOB" {
		t.Errorf("Lookup(alpha) = %v, %+v, %v; want alpha with its policy rule", tool, rule, ok)
	}
}

func TestNewRegistryErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy *tools.Policy
		tools  []tools.Tool
		want   string
	}{
		{"policy lists a missing tool", mustPolicy(t, "tools:\n  alpha: {}\n  shell: {}\n"),
			[]tools.Tool{fakeTool{"alpha", objectSchema}},
			`policy lists tool "shell", which does not exist (tools: alpha)`},
		{"duplicate name", nil,
			[]tools.Tool{fakeTool{"alpha", objectSchema}, fakeTool{"alpha", objectSchema}},
			`tool "alpha" is registered twice`},
		{"bad name", nil, []tools.Tool{fakeTool{"has space", objectSchema}}, `tool "has space": name must be`},
		{"schema not JSON", nil, []tools.Tool{fakeTool{"alpha", `{`}}, `tool "alpha": schema: `},
		{"schema empty", nil, []tools.Tool{fakeTool{"alpha", ``}}, `tool "alpha": schema: empty`},
		{"schema invalid", nil, []tools.Tool{fakeTool{"alpha", `{"type":"thing"}`}}, `tool "alpha": schema: `},
		{"schema fetches a file", nil, []tools.Tool{fakeTool{"alpha", `{"$ref":"file:///etc/passwd"}`}}, `only references within the tool's schema are supported`},
		{"unoffered tool's schema is still checked", mustPolicy(t, "tools: {}\n"),
			[]tools.Tool{fakeTool{"alpha", `{"type":"thing"}`}}, `tool "alpha": schema: `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tools.NewRegistry(tt.policy, tt.tools...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewRegistry error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestRegistryValidate(t *testing.T) {
	t.Parallel()
	r, err := tools.NewRegistry(nil, tools.NewHTTPRequest(tools.HTTPOptions{}), fakeTool{"list", `{
		"type": "object",
		"properties": {"items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}}}
	}`})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tool string
		args string
		want string // "" means valid
	}{
		{"http_request", `{"method":"GET","url":"https://api.example.com/"}`, ""},
		{"http_request", `{"method":"POST","url":"https://x/","headers":{"A":"b"},"body":"{}"}`, ""},
		{"http_request", `{"method":"GET"}`, "url: missing property"},
		{"http_request", `{}`, "method: missing property; url: missing property"},
		{"http_request", `{"method":"BREW","url":"x"}`, `method: value must be one of 'GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'`},
		{"http_request", `{"method":"GET","url":7}`, "url: must be string, not number"},
		{"http_request", `{"method":"GET","url":"x","headers":{"Accept":1}}`, "headers.Accept: must be string, not number"},
		{"http_request", `{"method":"GET","url":"x","timeout":5}`, "timeout: unknown property"},
		{"http_request", `[]`, "arguments: must be object, not array"},
		{"http_request", ``, "arguments: empty; want a JSON object"},
		{"http_request", "  \n", "arguments: empty; want a JSON object"},
		{"http_request", `{"method":"GET",}`, "arguments: invalid JSON at line 1, column 17: invalid character '}' looking for beginning of object key string"},
		{"http_request", "{\n  \"method\": \"GET\"\n  \"url\": \"x\"\n}", "arguments: invalid JSON at line 3, column 3: invalid character '\"' after object key:value pair"},
		{"http_request", `{"method":"GET","url":"x"`, "arguments: invalid JSON at line 1, column 25: unexpected end of JSON input"},
		{"http_request", `{"method":"GET","url":"x"} {}`, "arguments: invalid JSON at line 1, column 28: invalid character '{' after top-level value"},
		{"list", `{"items":[{"n":1},{"n":"two"}]}`, "items[1].n: must be integer, not string"},
		{"list", `{"items":[{"n":1.5}]}`, "items[0].n: must be integer, not number"},
	}
	for _, tt := range tests {
		err := r.Validate(tt.tool, json.RawMessage(tt.args))
		if tt.want == "" {
			if err != nil {
				t.Errorf("Validate(%q, %s) = %v, want nil", tt.tool, tt.args, err)
			}
			continue
		}
		var argsErr *tools.ArgsError
		if !errors.As(err, &argsErr) || err.Error() != tt.want {
			t.Errorf("Validate(%q, %s) = %v, want ArgsError %q", tt.tool, tt.args, err, tt.want)
		}
	}
}

func TestRegistryValidateUnknownTool(t *testing.T) {
	t.Parallel()
	p := mustPolicy(t, "tools:\n  alpha: {}\n")
	r, err := tools.NewRegistry(p, fakeTool{"alpha", objectSchema}, fakeTool{"beta", objectSchema})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"beta", "nope"} {
		if err := r.Validate(name, json.RawMessage(`{}`)); !errors.Is(err, tools.ErrUnknownTool) {
			t.Errorf("Validate(%q) = %v, want ErrUnknownTool", name, err)
		}
	}
}

func TestArgsErrorIsShort(t *testing.T) {
	t.Parallel()
	e := &tools.ArgsError{}
	for _, p := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		e.Problems = append(e.Problems, tools.ArgsProblem{Path: p, Message: "missing property"})
	}
	want := "a: missing property; b: missing property; c: missing property; d: missing property; e: missing property; and 2 more"
	if got := e.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestBuiltins(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		policy    *tools.Policy
		wantHosts string // in the description; "" means any host
	}{
		{"nil policy", nil, ""},
		{"default policy", tools.DefaultPolicy(), ""},
		{"allow_hosts", mustPolicy(t, designPolicy), "Only these hosts may be called: api.example.com, 127.0.0.1."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bs := tools.Builtins(tt.policy, nil)
			if got := strings.Join(names(bs), ","); got != "http_request" {
				t.Fatalf("Builtins() = %s, want http_request", got)
			}
			d := bs[0].Description()
			if tt.wantHosts == "" && strings.Contains(d, "Only these hosts") || !strings.Contains(d, tt.wantHosts) {
				t.Errorf("Builtins()[0].Description() = %q, want hosts %q", d, tt.wantHosts)
			}
			if _, err := tools.NewRegistry(tt.policy, bs...); err != nil {
				t.Errorf("NewRegistry(policy, Builtins()...) error = %v", err)
			}
		})
	}
}

func TestBuiltinsUnlistedInAFile(t *testing.T) {
	t.Parallel()
	p := mustPolicy(t, "tools: {}\n")
	r, err := tools.NewRegistry(p, tools.Builtins(p, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := r.Lookup("http_request"); ok {
		t.Errorf("Lookup(http_request) ok = true, want false: the file does not list it")
	}
}
