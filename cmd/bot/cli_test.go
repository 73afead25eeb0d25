package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// runBot runs the binary with env and stdin, and returns its output and
// exit code.
func runBot(t *testing.T, env []string, stdin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, botBinary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), goRace}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("bot %v: %v", args, err)
	}
	return string(out), code
}

// Help is help: it prints usage, exits 0 and listens on nothing.
// TestHelpNamesEverySetting: bot help lists every variable the bot reads
// (bot.Settings), but the two the MCP conformance suite sets for its own
// client, so that the list a newcomer reads first does not fall behind.
func TestHelpNamesEverySetting(t *testing.T) {
	out, code := runBot(t, nil, "", "help")
	if code != 0 {
		t.Fatalf("bot help exited %d:\n%s", code, out)
	}
	listed := map[string]bool{}
	for _, w := range regexp.MustCompile(`[A-Z][A-Z0-9_]+`).FindAllString(out, -1) {
		listed[w] = true
	}
	for _, name := range bot.Settings {
		if !listed[name] && !strings.HasPrefix(name, "MCP_CONFORMANCE_") {
			t.Errorf("bot help does not name %s:\n%s", name, out)
		}
	}
}

func TestHelpPrintsUsageAndListensOnNothing(t *testing.T) {
	t.Parallel() // no other test's bot gets its address (freeAddr)
	addr := freeAddr(t)
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"}, {"serve", "--help"}, {"playground", "-h"}, {"chat", "--help"},
		{"checkpoints", "--help"}, {"checkpoints", "list", "--help"}, {"threads", "--help"}, {"threads", "list", "-h"}, {"audit", "--help"},
		{"audit", "verify", "--help"}, {"audit", "export", "-h"},
		{"approvals", "--help"}, {"approvals", "list", "--help"},
	} {
		out, code := runBot(t, []string{"BOT_ADDR=" + addr}, "", args...)
		if code != 0 || !strings.Contains(out, "usage: bot") {
			t.Errorf("bot %v exited %d with:\n%s\nwant usage and 0", args, code, out)
		}
		if strings.Contains(out, "-checkpoint") && args[0] == "checkpoints" && args[1] == "list" {
			t.Errorf("bot checkpoints list --help lists another subcommand's flag:\n%s", out)
		}
		if conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			conn.Close()
			t.Errorf("bot %v left something listening on %s", args, addr)
		}
	}
	// Every subcommand's --help lists its flags (or says it has none) and
	// shows an example.
	for name, flag := range map[string]string{
		"serve": "no flags", "playground": "no flags", "tools": "no flags", "threads": "-limit", "chat": "-thread",
		"audit": "-since", "approvals": "-user", "checkpoints": "--thread",
	} {
		out, code := runBot(t, nil, "", name, "--help")
		if code != 0 || !strings.Contains(out, flag) || !regexp.MustCompile(`examples:\n  .*bot `+name).MatchString(out) {
			t.Errorf("bot %s --help (exit %d):\n%s\nwant %q and an example", name, code, out, flag)
		}
	}
	// The synopsis names the flags each checkpoints subcommand takes.
	if out, _ := runBot(t, nil, "", "checkpoints", "--help"); !strings.Contains(out, "list   --thread ID [--wide|--json]") ||
		!strings.Contains(out, "--to NEW] [--json]") {
		t.Errorf("bot checkpoints --help:\n%s\nwant list's --wide and fork's --json", out)
	}
	// serve names every endpoint it serves, for the proxy and the probes.
	if out, _ := runBot(t, nil, "", "serve", "--help"); !strings.Contains(out, "/healthz, /readyz, /metrics (Prometheus) and /oauth/callback") ||
		!strings.Contains(out, "/slack/events") {
		t.Errorf("bot serve --help:\n%s\nwant /slack/events, /healthz, /readyz, /metrics and /oauth/callback", out)
	}
	// The operator commands say they read the local Redis when REDIS_URL
	// is unset, as they do.
	for _, args := range [][]string{{"threads", "list"}, {"approvals", "list"}, {"checkpoints"}, {"audit"}} {
		if out, _ := runBot(t, nil, "", append(args, "--help")...); !strings.Contains(out, "REDIS_URL (unset: the") {
			t.Errorf("bot %v --help:\n%s\nwant it to say it reads the local Redis without REDIS_URL", args, out)
		}
	}
	// Every flag a synopsis has room for is in it.
	if out, _ := runBot(t, nil, "", "mcp", "connections", "--help"); !strings.Contains(out, "usage: bot mcp connections [--user U] [--server S] [--json]") {
		t.Errorf("bot mcp connections --help:\n%s\nwant --json in the synopsis", out)
	}
	out, _ := runBot(t, nil, "", "help")
	for _, want := range []string{"everything__echo", "<server>__<tool>", "MCP", "SLACK_STREAMING",
		"Without LLM_PROVIDER, OPENAI_API_KEY or ANTHROPIC_API_KEY", "LLM_THINKING_BUDGET", "the state directory",
		"revoke (REDIS_URL, or the local Redis; needs MCP_TOKEN_KEY)"} {
		if !strings.Contains(out, want) {
			t.Errorf("bot help does not mention %q:\n%s", want, out)
		}
	}
	if out, _ := runBot(t, nil, "", "version", "--help"); !strings.Contains(out, "no flags") || strings.Contains(out, "environment") {
		t.Errorf("bot version --help:\n%s\nwant no flags, and nothing about the environment, which it does not read", out)
	}
	if out, code := runBot(t, nil, "", "version"); code != 0 || !strings.HasPrefix(out, "countersign ") {
		t.Errorf("bot version = %q (exit %d)", out, code)
	}
	if out, code := runBot(t, nil, "", "frobnicate"); code == 0 || !strings.Contains(out, "bot help") {
		t.Errorf("bot frobnicate = %q (exit %d); want an error that points at bot help", out, code)
	}
}

// Operator commands refuse the embedded Redis, which is always empty.
func TestOperatorCommandsNeedRedisURL(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"threads", "list"}, {"checkpoints", "list", "--thread", "x"}, {"audit"}, {"audit", "verify"}, {"audit", "export"}, {"approvals", "list"}} {
		out, code := runBot(t, nil, "", args...)
		if code == 0 || !strings.Contains(out, "REDIS_URL") || strings.Count(out, "REDIS_URL is not set") != 1 {
			t.Errorf("bot %v without REDIS_URL = %q (exit %d); want one clear refusal", args, out, code)
		}
	}
}

// threads list finds a conversation, audit shows its decision, and
// delete asks first.
func TestThreadsAuditAndDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	root, card := h.deployFlow("Deployed.")
	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)

	var rows []threadRow
	if err := json.Unmarshal([]byte(h.cli(t, "", "threads", "list", "--json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Thread != thread || rows[0].Status.String() != "done" {
		t.Errorf("threads list = %+v; want the one done thread %s", rows, thread)
	}
	audit := h.cli(t, "", "audit", "--wide", "--thread", thread)
	if !strings.Contains(audit, `decision="approve"`) || !strings.Contains(audit, `by="`+approver+`"`) || !strings.Contains(audit, "hash=") {
		t.Errorf("audit of the thread:\n%s\nwant the approval by %s with its hash", audit, approver)
	}
	if out := h.cli(t, "", "audit", "--since", "1ms", "--thread", thread); !strings.Contains(out, "No audit records match") {
		t.Errorf("audit --since 1ms:\n%s\nwant nothing", out)
	}
	if out := h.cli(t, "n\n", "checkpoints", "delete", "--thread", thread); !strings.Contains(out, "Nothing deleted") {
		t.Errorf("delete answered no:\n%s", out)
	}
	if _, err := h.run("", "checkpoints", "list", "--thread", thread); err != nil {
		t.Errorf("the thread is gone after delete was refused: %v", err)
	}
	h.cli(t, "y\n", "checkpoints", "delete", "--thread", thread)
	out, err := h.run("", "checkpoints", "list", "--thread", thread)
	if err == nil || strings.Count(out, "no thread") != 1 {
		t.Errorf("list of a deleted thread: %v\n%s\nwant one clear error", err, out)
	}
}

// The bot is not in the channel: it cannot post the request, and the
// person who asked hears so through the command's response_url, with how
// to invite it.
func TestNotInTheChannelAnswersThroughResponseURL(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.slack.FailNext("chat.postMessage", "not_in_channel", 1)
	h.slack.FailNext("chat.postEphemeral", "not_in_channel", 1)
	h.command("deploy", url.Values{"response_url": {h.slack.ResponseURL()}}, nil)
	h.eventually(func() bool {
		for _, c := range h.slack.CallsTo("response_url") {
			if strings.Contains(c.Text, "/invite @Countersign") && c.Params["response_type"] == "ephemeral" {
				return true
			}
		}
		return false
	}, "an ephemeral answer through response_url")
	if n := len(h.model.Requests()); n != 0 {
		t.Errorf("the model was asked %d times for a request that could not be posted", n)
	}
}

// A failure is said once, in words: a failed approved call on its card
// (not again as a result reply), a model that is down on the error card
// with its name once.
func TestOneMessagePerFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	closed := freeAddr(t) // nothing listens there
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", "http://"+closed+"/deploy", "v2")), llmtest.Reply("It did not work."))
	h.command("deploy", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.click(card, "approve", approver)
	h.reply(root, "It did not work.")
	h.eventually(func() bool { return strings.Contains(h.card(card), "refused the connection") }, "the card to say the call failed")
	n := 0
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		latest, _ := h.slack.Message(c.Channel, c.TS)
		n += strings.Count(latest.Text+string(latest.Blocks), "refused the connection")
	}
	if n != 1 {
		t.Errorf("the failure is said %d times in the thread, want once (on the card)", n)
	}

	h.model.FailNext(4, http.StatusServiceUnavailable)
	h.command("hello", nil, nil)
	root2 := h.root(2)
	errCard := h.cardWith(root2, "retry_run", 20*time.Second)
	if text := string(errCard.Blocks); strings.Count(text, "gpt-4o-mini") != 1 || strings.Contains(text, "node model") {
		t.Errorf("error card = %s; want the model named once and no engine words", text)
	}
}

// chat --thread on a thread the Redis does not have says so, and names
// REDIS_URL, instead of "resuming" an empty thread.
func TestChatUnknownThreadNamesRedisURL(t *testing.T) {
	t.Parallel()
	out, code := runBot(t, []string{"TMPDIR=" + t.TempDir()}, "", "chat", "--thread", "chat-nope")
	if code != 0 || strings.Contains(out, "Resuming") || !strings.Contains(out, "no thread chat-nope") ||
		!strings.Contains(out, "REDIS_URL is not set") || !strings.Contains(out, "keeps nothing across runs") ||
		!strings.Contains(out, "no policy: every tool needs approval by anyone") {
		t.Errorf("bot chat --thread chat-nope on the embedded Redis (exit %d):\n%s\nwant it to say the thread is unknown and name REDIS_URL", code, out)
	}
	// Quitting at an approval prompt says the pause is gone with the
	// embedded Redis, and how to keep one.
	out, code = runBot(t, []string{"TMPDIR=" + t.TempDir()}, "fetch https://example.com\nq\n", "chat")
	if code != 0 || !strings.Contains(out, "Bye.") || !strings.Contains(out, "REDIS_URL=redis://") || strings.Contains(out, "Resume with") {
		t.Errorf("bot chat quit at a prompt on the embedded Redis (exit %d):\n%s\nwant a hint that names REDIS_URL", code, out)
	}

	h := newHarness(t, "")
	out, err := h.run("", "chat", "--thread", "chat-elsewhere")
	if err != nil || strings.Contains(out, "Resuming") || !strings.Contains(out, "no thread chat-elsewhere") || !strings.Contains(out, "REDIS_URL") {
		t.Errorf("bot chat --thread chat-elsewhere: %v\n%s\nwant it to say the thread is unknown and name REDIS_URL", err, out)
	}
}

// The start-up line names the policy file in force, or says there is none.
func TestStartupLineNamesThePolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	if logs := h.logs.String(); !strings.Contains(logs, "no policy: every tool needs approval by anyone") {
		t.Errorf("start-up without BOT_POLICY logged:\n%s\nwant it to say there is no policy", logs)
	}
	h = newHarness(t, gatePolicy)
	var path string
	for _, kv := range h.env {
		if p, ok := strings.CutPrefix(kv, "BOT_POLICY="); ok {
			path = p
		}
	}
	if logs := h.logs.String(); path == "" || !strings.Contains(logs, "policy: "+path) || strings.Contains(logs, "no policy") {
		t.Errorf("start-up with BOT_POLICY=%s logged:\n%s\nwant it to name the file", path, logs)
	}
}

// approvals list says who may decide a terminal chat's call, which has
// no channel, in words.
func TestApprovalsListChatThread(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("Fetching.", call("c1", "GET", h.target.URL+"/status", "")))
	if out, err := h.run("fetch the status\nq\n", "chat", "--thread", "chat-waiting"); err != nil || !strings.Contains(out, "Bye.") {
		t.Fatalf("bot chat: %v\n%s\nwant it to pause and quit", err, out)
	}
	out := h.cli(t, "", "approvals", "list", "--wide")
	if !strings.Contains(out, "chat-waiting") || !strings.Contains(out, "anyone (terminal chat)") || strings.Contains(out, "anyone in -") {
		t.Errorf("bot approvals list:\n%s\nwant the chat's call, decided by anyone at the terminal", out)
	}
}

// A wrong variable stops the bot at start with one line that names the
// variable and says what to do about it, before anything listens.
func TestWrongSettingSaysWhatToDo(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	closed := freeAddr(t) // nothing listens there
	bad := t.TempDir() + "/policy.yaml"
	if err := os.WriteFile(bad, []byte("tools:\n  http_request: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	typo := t.TempDir() + "/policy.yaml"
	if err := os.WriteFile(typo, []byte("tools:\n  http_request:\n    aprovers: [U012ABCDEF]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unknown := t.TempDir() + "/policy.yaml"
	if err := os.WriteFile(unknown, []byte("tools:\n  everything_echo: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  string // variables, space-separated
		want []string
	}{
		{"LLM_PROVIDER=nonsense", []string{"LLM_PROVIDER", "openai, anthropic or demo"}},
		{"OPENAI_BASE_URL=localhost:11434", []string{"OPENAI_BASE_URL: it has no scheme", "e.g. http://localhost:11434/v1"}},
		{"LLM_PROVIDER=anthropic ANTHROPIC_API_KEY=k ANTHROPIC_BASE_URL=ftp://proxy", []string{"ANTHROPIC_BASE_URL: its scheme must be http or https", "e.g. https://api.anthropic.com/v1"}},
		{"LOG_LEVEL=loud", []string{`LOG_LEVEL "loud"`, "debug, info, warn"}},
		{"REDIS_URL=localhost:6379", []string{"REDIS_URL is not a URL of the form redis://", "it has no scheme", "e.g. redis://localhost:6379/0"}},
		{"REDIS_URL=redis://" + closed + "/0", []string{"connect to redis at redis://" + closed, "is a Redis server running at that address", "unset it"}},
		{"BOT_POLICY=" + t.TempDir() + "/missing.yaml", []string{"BOT_POLICY:", "missing.yaml", "docs/policy.md", "unset BOT_POLICY"}},
		{"BOT_POLICY=" + bad, []string{"BOT_POLICY:", "line 2", "docs/policy.md"}},
		{"BOT_POLICY=" + typo, []string{"BOT_POLICY:", "line 3", `unknown key "aprovers"`, "known: approval, approvers,", "docs/policy.md"}},
		{"BOT_POLICY=" + unknown, []string{"BOT_POLICY " + unknown, `tool "everything_echo", which does not exist (tools: http_request)`,
			"fix the name or leave the tool out", "<server>__<tool>"}},
		{"REDIS_URL=redis://" + closed + "/0 REDIS_CLUSTER=yes", []string{`REDIS_CLUSTER="yes"`, "want true", "or false"}},
		{"BOT_PUBLIC_URL=countersign.example.com", []string{"BOT_PUBLIC_URL: it has no scheme", "e.g. https://countersign.example.com"}},
		{"MCP_TOKEN_KEY=short", []string{"MCP_TOKEN_KEY must be 32 bytes", "openssl rand -base64 32"}},
		{"SLACK_BOT_TOKEN=xoxb-1", []string{"SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "unset SLACK_BOT_TOKEN or run bot playground"}},
		{"SLACK_BOT_TOKEN=xoxb-1 SLACK_SIGNING_SECRET=s SLACK_API_URL=http://" + closed + "/api/",
			[]string{"slack auth.test", "cannot reach Slack's Web API", "SLACK_API_URL"}},
	} {
		env := append([]string{"BOT_ADDR=" + addr, "TMPDIR=" + t.TempDir()}, strings.Fields(c.env)...)
		out, code := runBot(t, env, "")
		if code != 1 || strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Errorf("bot with %s exited %d with:\n%s\nwant one line and exit 1", c.env, code, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("bot with %s said:\n%s\nwant it to say %q", c.env, out, w)
			}
		}
		if conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			conn.Close()
			t.Errorf("bot with %s left something listening on %s", c.env, addr)
		}
	}
}
