package bot_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/countersign/countersign/bot"
)

func TestSuggest(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, want string }{
		{"LLM_MODLE", "LLM_MODEL"},
		{"BOT_POLCY", "BOT_POLICY"},
		{"SLACK_SIGNING_SECRT", "SLACK_SIGNING_SECRET"},
		{"SLACK_SIGNIN_SECRET", "SLACK_SIGNING_SECRET"},
		{"OPENAI_BASEURL", "OPENAI_BASE_URL"},
		{"llm_model", "LLM_MODEL"},
		{"Bot_Policy", "BOT_POLICY"},
		{"OPENAI_MODEL", "LLM_MODEL"},    // the same setting under another prefix
		{"ANTHROPIC_MODEL", "LLM_MODEL"}, // …
		{"OPENAI_TEMPERATURE", "LLM_TEMPERATURE"},
		{"BOT_REDIS_URL", "REDIS_URL"}, // a setting behind one of the prefixes
		{"BOT_LOG_LEVEL", "LOG_LEVEL"},
		{"OPENAI_KEY", "OPENAI_API_KEY"}, // a word left out
		{"ANTHROPIC_KEY", "ANTHROPIC_API_KEY"},
		{"OPENAI_URL", "OPENAI_BASE_URL"},
		{"LLM_EFFORT", "LLM_REASONING_EFFORT"},
		{"SLACK_SECRET", "SLACK_SIGNING_SECRET"},
		{"LLM_MODEL_NAME", "LLM_MODEL"}, // a setting and more
		{"BOT_POLICY_FILE", "BOT_POLICY"},
		{"OPENAI_BASE", "OPENAI_BASE_URL"}, // the beginning of a setting
		{"LLM_THINK", "LLM_THINKING_BUDGET"},
		{"LLM_IMAGE", "LLM_IMAGES"},
		{"BOT_PORT", "BOT_ADDR"}, // names other programs use
		{"bot_host", "BOT_ADDR"},
		{"SLACK_TOKEN", "SLACK_BOT_TOKEN"},
		{"OPENAI_API_BASE", "OPENAI_BASE_URL"},
		// Nothing close, or two settings as close: no guess.
		{"LLM_API_KEY", ""},  // OPENAI_API_KEY or ANTHROPIC_API_KEY
		{"LLM_BASE_URL", ""}, // …
		{"LLM_URL", ""},      // REDIS_URL is no LLM_ setting
		{"SLACK_USER", ""},
		{"MCP_GITHUB_TOKEN", ""},
		{"SLACK_", ""},
		{"BOT_", ""},
		{"", ""},
		{"X", ""},
		{"LLM_\x1b[31m", ""},
	}
	for _, tt := range tests {
		if got := bot.Suggest(tt.name); got != tt.want {
			t.Errorf("Suggest(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// FuzzSuggest: any name at all (a name is bytes, not always UTF-8) gets
// a suggestion that is one of the settings, or none, and the warning
// about it is one line of printable ASCII that holds the name.
func FuzzSuggest(f *testing.F) {
	for _, s := range []string{"LLM_MODLE", "llm_model", "OPENAI_KEY", "SLACK_", "BOT_POLICY_FILE", "LLM_\x1b[2J", "MCP_\xff\xfe", "", "_", "__", "A_B_C_D_E_F"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := bot.Suggest(name)
		if got != "" && !slices.Contains(bot.Settings, got) {
			t.Fatalf("Suggest(%q) = %q, which is not a setting", name, got)
		}
		line := bot.UnknownSetting{Name: name, Suggestion: got}.String()
		for i := 0; i < len(line); i++ {
			if c := line[i]; c < 0x20 || c > 0x7e {
				t.Fatalf("the warning about %q holds byte %#x: %q", name, c, line)
			}
		}
		if !strings.Contains(line, name) && !strings.Contains(line, strconv.QuoteToASCII(name)) {
			t.Fatalf("the warning about %q does not name it: %q", name, line)
		}
	})
}

// A newcomer's misspelled settings are each named, with the setting
// meant, and nothing else is: not the bot's settings, not variables of
// other prefixes, not those Kubernetes sets for a Service, not a
// variable the policy file gives an MCP server, not a secret the bot
// keeps from tool servers. No value is kept.
func TestUnknownSettings(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(`mcp_servers:
  github:
    command: [github-mcp]
    env: {GITHUB_TOKEN: "${MCP_GITHUB_TOKEN}"}
    inherit_env: [SLACK_WEBHOOK_PROXY]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	environ := []string{
		"PATH=/usr/bin",
		"LLM_MODLE=sk-live-secret-value",
		"LLM_MODEL=gpt-4o",
		"BOT_POLICY=" + policy,
		"BOT_POLCY=./policy.yaml",
		"SLACK_SIGNING_SECRT=8f14e45fceea167a5a36dedd4bea2543",
		"REDIS_PORT=tcp://10.0.0.1:6379",
		"REDIS_SERVICE_HOST=10.0.0.1",
		"REDIS_URLL=redis://localhost:6379/0", // REDIS_ is not the bot's alone
		"BOT_SERVICE_HOST=10.0.0.2",
		"BOT_PORT=tcp://10.0.0.2:3000",
		"MCP_TICKETS_PORT=tcp://10.0.0.3:8080",
		"BOT_PORT_3000_TCP_ADDR=10.0.0.2",
		"MCP_TICKETS_SERVICE_PORT_HTTP=8080",
		"MCP_GITHUB_TOKEN=ghp_secret",
		"SLACK_WEBHOOK_PROXY=http://proxy",
		"SLACK_CLIENT_SECRET=shh",
		"SLACK_USER_TOKEN=xoxp-1",
		"llm_provider=openai",
		"MCP_TIMEOUT=30",
		"ANTHROPIC_MODEL=claude",
		"SLACK_PORT=3000", // a person's: Kubernetes sets tcp://…
	}
	got := bot.UnknownSettings(environ)
	want := []bot.UnknownSetting{
		{Name: "LLM_MODLE", Suggestion: "LLM_MODEL"},
		{Name: "BOT_POLCY", Suggestion: "BOT_POLICY"},
		{Name: "SLACK_SIGNING_SECRT", Suggestion: "SLACK_SIGNING_SECRET"},
		{Name: "llm_provider", Suggestion: "LLM_PROVIDER"},
		{Name: "MCP_TIMEOUT"},
		{Name: "ANTHROPIC_MODEL", Suggestion: "LLM_MODEL"},
		{Name: "SLACK_PORT"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("UnknownSettings() =\n%+v\nwant\n%+v", got, want)
	}
	for _, u := range got {
		s := u.String()
		if !strings.Contains(s, u.Name) || (u.Suggestion != "" && !strings.Contains(s, "did you mean "+u.Suggestion+"?")) {
			t.Errorf("%+v says %q; want the name and the suggestion", u, s)
		}
		for _, kv := range environ {
			if _, v, _ := strings.Cut(kv, "="); strings.Contains(s, v) {
				t.Errorf("%+v says %q, which holds the value %q", u, s, v)
			}
		}
	}
	if got := bot.UnknownSettings([]string{"LLM_\x1b]0;pwned\x07=x"}); len(got) != 1 || strings.ContainsAny(got[0].String(), "\x1b\x07") {
		t.Errorf("a name with control characters: %+v; want it warned about, escaped", got)
	}
}

// systemVariables are variables of the system the program reads, that
// are not its settings.
var systemVariables = []string{"HOME", "USER", "COLUMNS"}

// TestSettingsAreWhatTheProgramReads: every environment variable the
// program's source reads by name (getenv("…"), get("…"), os.Getenv,
// os.LookupEnv, or through a string constant) is in bot.Settings, and
// each of bot.Settings is read somewhere: the list cannot drift from
// the code.
func TestSettingsAreWhatTheProgramReads(t *testing.T) {
	t.Parallel()
	type call struct {
		arg  ast.Expr
		file string
		pos  token.Pos
	}
	fset := token.NewFileSet()
	consts := map[string][]string{} // a string constant's name: its values
	var reads []call
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != ".." && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							consts[name.Name] = append(consts[name.Name], v)
						}
					}
				}
			case *ast.CallExpr:
				var fn string
				switch f := n.Fun.(type) {
				case *ast.Ident:
					fn = f.Name
				case *ast.SelectorExpr:
					fn = f.Sel.Name
				}
				if slices.Contains([]string{"getenv", "get", "Getenv", "LookupEnv"}, fn) && len(n.Args) == 1 {
					reads = append(reads, call{n.Args[0], path, n.Pos()})
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	for _, r := range reads {
		var names []string
		switch a := r.arg.(type) {
		case *ast.BasicLit:
			if a.Kind == token.STRING {
				v, _ := strconv.Unquote(a.Value)
				names = []string{v}
			}
		case *ast.Ident:
			names = consts[a.Name] // a variable (a name read in a loop) has none
		case *ast.SelectorExpr:
			names = consts[a.Sel.Name]
		}
		for _, name := range names {
			read[name] = true
			if !slices.Contains(bot.Settings, name) && !slices.Contains(systemVariables, name) {
				t.Errorf("%s reads %s, which is not in bot.Settings: add it there and to docs/configuration.md", fset.Position(r.pos), name)
			}
		}
	}
	if len(read) < len(bot.Settings)/2 {
		t.Fatalf("found %d variables read in the source; want the bot's %d settings at least: is the walk reading the module?", len(read), len(bot.Settings))
	}
	for _, s := range bot.Settings {
		if !read[s] {
			t.Errorf("bot.Settings names %s, which nothing reads: remove it (and from docs/configuration.md)", s)
		}
	}
}

// TestSettingsAreDocumented: docs/configuration.md's table lists every
// setting, and only settings.
func TestSettingsAreDocumented(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")
	documented := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| `") || len(cells) < 3 {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			documented[m[1]] = true
			if !slices.Contains(bot.Settings, m[1]) {
				t.Errorf("docs/configuration.md lists %s, which is not in bot.Settings", m[1])
			}
		}
	}
	for _, s := range bot.Settings {
		if !documented[s] {
			t.Errorf("docs/configuration.md does not list %s in its table", s)
		}
	}
}
