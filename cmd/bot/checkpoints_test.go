package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// An operator lists a Slack flow's checkpoints, forks the paused one, and
// the fork resumes from that step.
func TestCheckpointsCommand(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	root, card := h.deployFlow("Deployed.")
	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)

	var hist []graph.Checkpoint
	if err := json.Unmarshal([]byte(h.cli(t, "", "checkpoints", "list", "--thread", thread, "--json")), &hist); err != nil {
		t.Fatal(err)
	}
	var paused string
	var statuses []string
	for _, cp := range hist {
		statuses = append(statuses, cp.Status.String())
		if cp.Status == graph.Paused {
			paused = cp.ID
		}
	}
	if len(hist) < 4 || statuses[0] != "done" || paused == "" {
		t.Fatalf("list = %v; want the flow's history, newest (done) first, with its pause", statuses)
	}
	text := h.cli(t, "", "checkpoints", "list", "--wide", "--thread", thread)
	if !strings.Contains(text, "paused") || !strings.Contains(text, "0.0:http_request") {
		t.Errorf("list's table does not show the pause and its waiting call:\n%s", text)
	}

	fork := thread + "/replay"
	h.cli(t, "", "checkpoints", "fork", "--thread", thread, "--checkpoint", paused, "--to", fork)
	shown := h.cli(t, "", "checkpoints", "show", "--thread", fork)
	if !strings.Contains(shown, "paused") || !strings.Contains(shown, "call 0.0 http_request pending") {
		t.Errorf("show of the fork:\n%s\nwant it paused on the call", shown)
	}
	// Resume the fork from the terminal: approve, and the call runs again
	// there (the original thread is untouched).
	h.model.Then(llmtest.Reply("Deployed again."))
	out := h.cli(t, "a\n", "chat", "--thread", fork, "--user", approver)
	if !strings.Contains(out, "Deployed again.") || h.target.Count("POST /deploy") != 2 {
		t.Errorf("resuming the fork printed:\n%s\ndeploy ran %d times in all, want 2", out, h.target.Count("POST /deploy"))
	}

	h.cli(t, "", "checkpoints", "delete", "--thread", fork, "--yes")
	if _, err := h.run("", "checkpoints", "list", "--thread", fork); err == nil {
		t.Error("list of a deleted thread succeeded")
	}
}

// cli runs the bot binary with the harness's environment and returns its
// standard output; it fails the test if the command fails.
func (h *harness) cli(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := h.run(stdin, args...)
	if err != nil {
		t.Fatalf("bot %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (h *harness) run(stdin string, args ...string) (string, error) {
	cmd := exec.Command(botBinary, args...)
	cmd.Env = h.env
	cmd.Stdin = strings.NewReader(stdin)
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}
