package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// conformanceSuite is the MCP conformance suite the client is tested
// with (fetched by .ci/with-redis --node).
const conformanceSuite = "@modelcontextprotocol/conformance@0.1.16"

// conformanceScenarios are the suite's client scenarios the bot's client
// runs, and why one is expected to fail (not built, or not one a bot can act in), if it is.
var conformanceScenarios = []struct {
	name, knownFailure string
}{
	{"initialize", ""},
	{"tools_call", ""},
	{"elicitation-sep1034-client-defaults", ""},
	{"sse-retry", ""},
	{"auth/metadata-default", ""},
	{"auth/metadata-var1", ""},
	{"auth/metadata-var2", ""},
	{"auth/metadata-var3", ""},
	{"auth/basic-cimd", ""},
	{"auth/scope-from-www-authenticate", ""},
	{"auth/scope-from-scopes-supported", ""},
	{"auth/scope-omitted-when-undefined", ""},
	{"auth/scope-step-up", ""},
	{"auth/scope-retry-limit", ""},
	{"auth/token-endpoint-auth-basic", ""},
	{"auth/token-endpoint-auth-post", ""},
	{"auth/token-endpoint-auth-none", ""},
	{"auth/pre-registration", ""},
	{"auth/2025-03-26-oauth-metadata-backcompat", ""},
	{"auth/2025-03-26-oauth-endpoint-fallback", ""},
	{"auth/resource-mismatch", ""},
	{"auth/offline-access-scope", ""},
	{"auth/offline-access-not-supported", ""},
	{"auth/client-credentials-jwt", ""},
	{"auth/client-credentials-basic", ""},
	{"auth/cross-app-access-complete-flow", ""},
}

var conformanceResult = regexp.MustCompile(`Passed: (\d+)/(\d+), (\d+) failed`)

// The MCP conformance suite's client scenarios, with `bot mcp
// conformance-client` — the bot's MCP and OAuth code — as the client and
// the suite's own servers; the client plays the person's browser, and
// the person who sends the bot's input form as it is shown.
func TestMCPConformanceClientScenarios(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the conformance suite's servers: not in -short")
	}
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Fatalf("npx not found (%v): the conformance suite runs with Node's npx; run the test through .ci/with-redis --node", err)
	}
	env := os.Environ()
	if out, err := exec.Command("node", "--version").Output(); err == nil {
		major, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0], "v"))
		if major < 22 {
			shim, _ := filepath.Abs("testdata/node-globsync/register.mjs")
			env = append(env, "NODE_OPTIONS=--import "+shim)
		}
	}
	// The suite's own program, from npx's cache (where .ci/with-redis
	// --node put it): found once, and run as it is for each scenario,
	// which spares every scenario npm's start-up.
	found, err := exec.Command(npx, "-y", "-p", conformanceSuite, "-c", "command -v conformance").Output()
	suite := strings.TrimSpace(string(found))
	if err != nil || suite == "" {
		t.Fatalf("npx -p %s: no conformance program (%v): run the test through .ci/with-redis --node", conformanceSuite, err)
	}
	command := botBinary + " mcp conformance-client --client-metadata-url https://conformance-test.local/client-metadata.json"
	// Each scenario is a suite process of its own, on ports it picks and
	// in a directory of its own: they run side by side, as many at a
	// time as -parallel allows, and most of their time is the suite's
	// and the bot's start-up and the suite's waits.
	rows := make([]string, len(conformanceScenarios))
	t.Run("scenarios", func(t *testing.T) {
		for i, sc := range conformanceScenarios {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, suite, "client", "--command", command, "--scenario", sc.name)
				cmd.Env, cmd.Dir = env, t.TempDir()
				out, _ := cmd.CombinedOutput()
				m := conformanceResult.FindStringSubmatch(string(out))
				passed := m != nil && m[3] == "0" && strings.Contains(string(out), "OVERALL: PASSED")
				checks, result := "-", "fail"
				if m != nil {
					checks = m[1] + "/" + m[2]
				}
				switch {
				case passed:
					result = "pass"
				case sc.knownFailure != "":
					result = "fail (expected: " + sc.knownFailure + ")"
				}
				rows[i] = fmt.Sprintf("| %s | %s | %s |\n", sc.name, checks, result)
				if !passed && sc.knownFailure == "" {
					t.Errorf("scenario %s failed:\n%s", sc.name, tail(string(out), 40))
				}
			})
		}
	})
	t.Logf("MCP conformance, client scenarios:\n| scenario | checks passed | result |\n| --- | --- | --- |\n%s", strings.Join(rows, ""))
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
