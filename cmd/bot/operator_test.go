package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// A failure of an operator command is one line on the terminal, naming
// the command and where to look, with a non-zero exit: a bad flag is not
// followed by the whole usage and said again; a broken audit file is said
// once.
func TestOperatorFailuresAreOneLine(t *testing.T) {
	t.Parallel()
	broken := filepath.Join(t.TempDir(), "broken.jsonl")
	if err := os.WriteFile(broken, []byte(`{"id":"1700000000000-0","seq":"1","prev":"","hash":"00","event":"decision"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args  []string
		want  string
		lines int
	}{
		{[]string{"threads", "list", "--limit", "x"}, "bot: threads list: invalid value", 1},
		{[]string{"approvals", "list", "--bogus"}, "bot: approvals list: flag provided but not defined: -bogus (bot approvals list --help lists the flags)", 1},
		{[]string{"tools", "--bogus"}, "bot: tools: flag provided but not defined", 1},
		{[]string{"audit", "--limit", "many"}, "bot: audit: invalid value", 1},
		{[]string{"checkpoints"}, "bot: checkpoints: name a subcommand", 1},
		{[]string{"checkpoints", "bogus"}, `bot: checkpoints: unknown subcommand "bogus"`, 1},
		{[]string{"checkpoints", "show", "--bogus"}, "bot: checkpoints show: flag provided but not defined", 1},
		{[]string{"audit", "verify", "--file", broken}, "BROKEN: ", 2},
		{[]string{"mcp", "connections"}, "bot: bot mcp connections opens the connections the bot keeps, sealed with MCP_TOKEN_KEY, " +
			"and MCP_TOKEN_KEY is not set: set it to the bot's", 1},
	}
	for _, tt := range tests {
		out, code := runBot(t, nil, "", tt.args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code == 0 || len(lines) != tt.lines || !strings.HasPrefix(lines[0], tt.want) || strings.Count(out, "bot: ") > 1 {
			t.Errorf("bot %s (exit %d):\n%s\nwant %d line(s), the first starting %q, and a non-zero exit", strings.Join(tt.args, " "), code, out, tt.lines, tt.want)
		}
	}
}

// Every checkpoints subcommand says the same one line of a thread that
// is not there.
func TestCheckpointsOfAnUnknownThreadSayItAlike(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	const want = `bot: no thread "nope" in this Redis (bot threads list names the threads)`
	for _, args := range [][]string{
		{"list", "--thread", "nope"},
		{"show", "--thread", "nope"},
		{"show", "--thread", "nope", "--checkpoint", "cp"},
		{"fork", "--thread", "nope", "--checkpoint", "cp", "--to", "other"},
		{"delete", "--thread", "nope", "--yes"},
	} {
		out, err := h.run("", append([]string{"checkpoints"}, args...)...)
		if err == nil || strings.TrimSpace(out) != want {
			t.Errorf("bot checkpoints %s = %v:\n%s\nwant %q", strings.Join(args, " "), err, out, want)
		}
	}
}

// The operator listings are tables that fit the terminal: 80 columns, or
// $COLUMNS; hashes are shortened as git shortens them, and --wide (or
// --json) has them whole.
func TestOperatorTablesFitTheTerminal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	root, card := h.deployFlow("Deployed.")
	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
	// A second flow left waiting, for approvals list.
	h.model.Then(llmtest.Reply("Deploying.", call("c2", "POST", h.target.URL+"/deploy", "v3")))
	h.command("deploy v3", nil, nil)
	h.cards(h.root(2), 1)

	fits := func(out string, width int) bool {
		for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			if utf8.RuneCountInString(line) > width {
				return false
			}
		}
		return true
	}
	for _, args := range [][]string{
		{"audit"}, {"threads", "list"}, {"approvals", "list"}, {"checkpoints", "list", "--thread", thread},
	} {
		out := h.cli(t, "", args...)
		if !fits(out, 80) || len(strings.Split(strings.TrimSpace(out), "\n")) < 2 {
			t.Errorf("bot %s:\n%s\nwant a table of lines of 80 columns at most", strings.Join(args, " "), out)
		}
	}

	audit := h.cli(t, "", "audit", "--thread", thread)
	wide := h.cli(t, "", "audit", "--wide", "--thread", thread)
	var full string
	for _, f := range strings.Fields(wide) {
		if v, ok := strings.CutPrefix(f, `args_hash="`); ok {
			full = strings.TrimSuffix(v, `"`)
			break
		}
	}
	if len(full) != 64 || !strings.Contains(audit, full[:8]) || strings.Contains(audit, full[:9]) ||
		!strings.Contains(audit, "approve") || !strings.Contains(audit, approver) {
		t.Errorf("bot audit:\n%s\nwant the approval by %s with its arguments' hash shortened (bot audit --wide:\n%s)", audit, approver, wide)
	}

	// A wider terminal shows more: the thread whole.
	if out := h.cli(t, "", "audit"); strings.Contains(out, thread) {
		t.Errorf("bot audit in 80 columns:\n%s\nwant the thread cut", out)
	}
	h.env = append(h.env, "COLUMNS=120")
	if out := h.cli(t, "", "audit"); !fits(out, 120) || !strings.Contains(out, thread) {
		t.Errorf("bot audit with COLUMNS=120:\n%s\nwant lines of 120 columns at most, with the thread whole", out)
	}
}
