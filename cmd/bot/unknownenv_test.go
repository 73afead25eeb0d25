package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Secret-looking values of misspelled settings: no output may hold them.
const (
	modelTypoValue  = "sk-live-0f3c9a7e5b1d2468ace0"
	secretTypoValue = "8f14e45fceea167a5a36dedd4bea2543"
)

// A misspelled setting is named, with the setting meant, once, by every
// command that reads the environment, and never with its value: a line
// on stderr for bot chat and the operator commands (before what they
// print), a warning in the log for serve and the playground. It stops
// nothing. Known variables, REDIS_PORT (which Kubernetes sets for a
// Service named redis) and the help and version commands say nothing.
func TestMisspelledSettingIsNamedNotItsValue(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("tools:\n  http_request: {approval: never}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noValue := func(what, out string) {
		t.Helper()
		for _, v := range []string{modelTypoValue, secretTypoValue, "tcp://10.0.0.1"} {
			if strings.Contains(out, v) {
				t.Errorf("%s printed the value %q:\n%s", what, v, out)
			}
		}
	}
	typo := "LLM_MODLE=" + modelTypoValue
	k8s := "REDIS_PORT=tcp://10.0.0.1:6379"

	// bot chat, on the embedded Redis: the line comes first, and the
	// chat goes on.
	out, code := runBot(t, []string{"TMPDIR=" + t.TempDir(), typo, k8s, "LLM_MODEL=demo-typo-check"}, "", "chat")
	want := "bot chat: LLM_MODLE is set, but the bot reads no such variable: it is ignored; did you mean LLM_MODEL?\n"
	if code != 0 || !strings.HasPrefix(out, want) || strings.Count(out, "LLM_MODLE") != 1 || !strings.Contains(out, "Countersign chat") {
		t.Errorf("bot chat with %s (exit %d):\n%s\nwant it to start with %q, once, and chat", "LLM_MODLE", code, out, want)
	}
	if strings.Contains(out, "REDIS_PORT") || strings.Contains(out, "LLM_MODEL ") {
		t.Errorf("bot chat warned about a variable that is no mistake:\n%s", out)
	}
	noValue("bot chat", out)

	// bot tools, with the policy under a misspelled name.
	out, code = runBot(t, []string{"BOT_POLCY=" + policy, "SLACK_SIGNING_SECRT=" + secretTypoValue, k8s}, "", "tools")
	for _, w := range []string{
		"bot tools: BOT_POLCY is set, but the bot reads no such variable: it is ignored; did you mean BOT_POLICY?\n",
		"bot tools: SLACK_SIGNING_SECRT is set, but the bot reads no such variable: it is ignored; did you mean SLACK_SIGNING_SECRET?\n",
	} {
		if code != 0 || strings.Count(out, w) != 1 || !strings.Contains(out, "http_request") {
			t.Errorf("bot tools (exit %d):\n%s\nwant the tools, and once: %q", code, out, w)
		}
	}
	noValue("bot tools", out)

	// serve that cannot start: the warning says why, before the error.
	out, code = runBot(t, []string{"BOT_ADDR=" + freeAddr(t), "SLACK_BOT_TOKEN=xoxb-1", "SLACK_SIGNING_SECRT=" + secretTypoValue}, "")
	warn, after, _ := strings.Cut(out, "\n")
	if code != 1 || !strings.Contains(warn, "level=warning") || !strings.Contains(warn, "variable=SLACK_SIGNING_SECRT") ||
		!strings.Contains(warn, "suggestion=SLACK_SIGNING_SECRET") || !strings.Contains(after, "bot: serving Slack needs SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET") {
		t.Errorf("bot serve with SLACK_SIGNING_SECRT (exit %d):\n%s\nwant a warning that names it and SLACK_SIGNING_SECRET, then the error", code, out)
	}
	noValue("bot serve", out)

	// Help and version read no settings, and say nothing of them.
	for _, args := range [][]string{{"version"}, {"--help"}, {"threads", "list", "--help"}, {"tools", "-h"}} {
		if out, code := runBot(t, []string{typo}, "", args...); code != 0 || strings.Contains(out, "LLM_MODLE") {
			t.Errorf("bot %v with LLM_MODLE (exit %d):\n%s\nwant nothing said of it", args, code, out)
		}
	}
}

// The playground, started as `go run ./cmd/bot` is with nothing else
// configured, logs one warning for a misspelled setting, with the
// variable and the suggestion as fields, and comes up all the same.
func TestPlaygroundWarnsOfMisspelledSetting(t *testing.T) {
	t.Parallel()
	b := startPlayground(t, "TMPDIR="+t.TempDir(), "LLM_MODLE="+modelTypoValue, "REDIS_PORT=tcp://10.0.0.1:6379", "OPENAI_MODEL=gpt-4o")
	logs := b.logs.String()
	warnings := map[string]string{}
	for _, line := range strings.Split(logs, "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil || e["level"] != "warning" || e["variable"] == nil {
			continue
		}
		name, _ := e["variable"].(string)
		if _, twice := warnings[name]; twice {
			t.Errorf("two warnings about %s:\n%s", name, logs)
		}
		s, _ := e["suggestion"].(string)
		warnings[name] = s
	}
	want := map[string]string{"LLM_MODLE": "LLM_MODEL", "OPENAI_MODEL": "LLM_MODEL"}
	if len(warnings) != len(want) || warnings["LLM_MODLE"] != want["LLM_MODLE"] || warnings["OPENAI_MODEL"] != want["OPENAI_MODEL"] {
		t.Errorf("the playground warned of %v; want %v; logs:\n%s", warnings, want, logs)
	}
	if strings.Contains(logs, modelTypoValue) || strings.Contains(logs, "REDIS_PORT") {
		t.Errorf("the playground's logs hold a value, or warn of REDIS_PORT:\n%s", logs)
	}
}

// Serving Slack, with the harness's environment (every variable one the
// bot reads) and one misspelled setting: one warning, for it alone, and
// the bot serves. The operator commands run beside it say it too.
func TestServeWarnsOfMisspelledSettingOnly(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "")
	h.env = append(h.env, "LLM_TEMPERATUR="+modelTypoValue, "REDIS_PORT=tcp://10.0.0.1:6379", "REDIS_SERVICE_HOST=10.0.0.1")
	h.start()
	logs := h.logs.String()
	if n := strings.Count(logs, `"variable":`); n != 1 || !strings.Contains(logs, `"variable":"LLM_TEMPERATUR"`) ||
		!strings.Contains(logs, `"suggestion":"LLM_TEMPERATURE"`) || !strings.Contains(logs, "did you mean LLM_TEMPERATURE?") {
		t.Errorf("serve logged %d warnings of variables; want one, of LLM_TEMPERATUR suggesting LLM_TEMPERATURE:\n%s", n, logs)
	}
	if strings.Contains(logs, modelTypoValue) {
		t.Errorf("serve logged the value of LLM_TEMPERATUR:\n%s", logs)
	}
	out, err := h.run("", "threads", "list")
	if err != nil || strings.Count(out, "bot threads: LLM_TEMPERATUR is set") != 1 || strings.Contains(out, modelTypoValue) || strings.Contains(out, "REDIS_") {
		t.Errorf("bot threads list: %v\n%s\nwant one line naming LLM_TEMPERATUR, without its value", err, out)
	}
}
