package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/tools/mcp"
)

var (
	spyOnce   sync.Once
	spyBinary string
	spyErr    error
)

// spyServer builds testdata/mcpspy, a hostile stdio MCP server, beside
// the bot's binary, where any account may run it.
func spyServer(t *testing.T) string {
	t.Helper()
	spyOnce.Do(func() {
		dir := filepath.Dir(botBinary)
		if spyErr = os.Chmod(dir, 0o755); spyErr != nil {
			return
		}
		spyBinary = filepath.Join(dir, "mcpspy")
		// Built as the bot is, so that the packages it shares with the
		// bot (the MCP SDK, the standard library) come from the build
		// cache: built otherwise, they are compiled anew, which on a
		// fresh machine takes a minute of two CPUs while the other tests
		// wait for them.
		args := []string{"build", "-o", spyBinary}
		if raceBuild {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "./testdata/mcpspy")...).CombinedOutput()
		if err != nil {
			t.Logf("building mcpspy: %s", out)
			spyErr = err
		}
	})
	if spyErr != nil {
		t.Fatalf("building the spy server: %v", spyErr)
	}
	return spyBinary
}

func spyPolicy(t *testing.T) string {
	return `mcp_servers:
  spy:
    command: [` + spyServer(t) + `]
    approval: never
tools:
  http_request: {approvers: [` + approver + `]}
`
}

// spyTries has the spy look around while a deploy waits for approval
// in another thread, and try to approve it with what it found. It
// returns what the spy reported.
func spyTries(t *testing.T, h *harness) string {
	t.Helper()
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")))
	h.command("deploy", nil, nil)
	card := h.cards(h.root(1), 1)[0]
	click := slacktest.BlockActions(slacktest.Click{User: approver, Channel: card.Channel, MessageTS: card.TS, ThreadTS: card.ThreadTS,
		ActionID: "approve", Value: buttonValue(t, card, "approve")})
	args, _ := json.Marshal(map[string]string{"url": "http://" + h.addr + "/slack/interactions", "body": string(click)})
	h.model.Then(llmtest.Reply("Looking around.", llmtest.Call("s1", "spy__probe", string(args))), llmtest.Reply("Seen it all."))
	h.command("look around", nil, nil)
	var report string
	h.eventually(func() bool {
		for _, r := range h.model.Requests() {
			for _, m := range r.Messages {
				if m.Role == "tool" && strings.Contains(m.Text(), "clicks signed with") {
					report = m.Text()
					return true
				}
			}
		}
		return false
	}, "the spy's report")
	for _, secret := range []string{signingSecret, botToken, "OPENAI_API_KEY", "test-key", "SLACK_", "REDIS_URL", h.redis.Addr()} {
		if strings.Contains(report, secret) {
			t.Errorf("the tool server found %q:\n%s", secret, report)
		}
	}
	// The server's parent (on Linux, the process that ends it with the
	// bot), and the bot.
	if !strings.Contains(report, "parent environ: open /proc/") || !strings.Contains(report, "permission denied") {
		t.Errorf("the tool server read its parent's /proc/PID/environ:\n%s", report)
	}
	if !strings.Contains(report, "parent mem: open /proc/") {
		t.Errorf("the tool server opened its parent's memory:\n%s", report)
	}
	bot := strconv.Itoa(h.bot.Process.Pid)
	if !strings.Contains(report, "environ: open /proc/"+bot+"/environ: permission denied") {
		t.Errorf("the tool server read the bot's /proc/%s/environ:\n%s", bot, report)
	}
	if !strings.Contains(report, "mem: open /proc/"+bot+"/mem: ") {
		t.Errorf("the tool server opened the bot's memory (/proc/%s/mem):\n%s", bot, report)
	}
	if !strings.Contains(report, "accepted: 0\n") {
		t.Errorf("a click the tool server signed was accepted:\n%s", report)
	}
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Errorf("the deploy ran %d times with nobody approving it", n)
	}
	if got := h.card(card); !strings.Contains(got, `"action_id":"approve"`) || strings.Contains(got, "Approved by") {
		t.Errorf("the card no longer waits for a person: %s", got)
	}
	return report
}

// A stdio MCP server started by the bot finds none of its secrets: not in
// its environment, not in the bot's /proc entries, and it cannot sign a
// click. When the bot runs as root, as CI does, the server runs as nobody.
func TestMCPServerSeesNoSecret(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spyPolicy(t))
	// The tests' Redis takes no password: any process on the host,
	// the server included, could write a claim into it.
	if !strings.Contains(h.logs.String(), "Redis accepts connections without a password") {
		t.Errorf("no warning at start-up of a Redis without a password beside a stdio server")
	}
	report := spyTries(t, h)
	if os.Geteuid() == 0 {
		if nobody := nobodyCred(t); !strings.Contains(report, "uid "+strconv.Itoa(int(nobody.Uid))+"\n") {
			t.Errorf("the bot runs as root and its tool server does not run as nobody:\n%s", report)
		}
	}
	for _, line := range strings.Split(report, "\n") {
		if name, ok := strings.CutPrefix(line, "env "); ok {
			name, _, _ = strings.Cut(name, "=")
			if !strings.HasPrefix(name, "LC_") && !strings.Contains(" "+strings.Join(mcp.BaseEnv, " ")+" ", " "+name+" ") {
				t.Errorf("the tool server was given %s, which is not in the base environment", name)
			}
		}
	}
}

// A server of the bot's own user cannot read the bot's /proc entries:
// the bot is non-dumpable. (When the tests run as root, the bot runs as
// nobody here, so that it and its server share a user, as they do when
// the bot is not root.)
func TestMCPServerOfTheBotsUserSeesNoSecret(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.stop()
	dir, err := os.MkdirTemp("", "policy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(spyPolicy(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h.env = append(h.env, "BOT_POLICY="+path)
	if os.Geteuid() == 0 {
		h.cred = nobodyCred(t)
	}
	h.start()
	report := spyTries(t, h)
	if !strings.Contains(report, "uid "+strconv.Itoa(botUID(h))+"\n") {
		t.Errorf("the server does not run as the bot's user:\n%s", report)
	}
}

// nobodyCred is the account nobody.
func nobodyCred(t *testing.T) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("the tests run as root and need the user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

// botUID is the account the harness's bot runs as.
func botUID(h *harness) int {
	if h.cred != nil {
		return int(h.cred.Uid)
	}
	return os.Geteuid()
}

// Naming one of the bot's secrets in inherit_env stops the bot at
// start-up, with the line and the server.
func TestMCPInheritEnvOfASecretIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.stop()
	if strings.Contains(h.logs.String(), "Redis accepts connections without a password") {
		t.Errorf("a bot without stdio servers warns of Redis without a password")
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policy := "mcp_servers:\n  spy:\n    command: [" + spyServer(t) + "]\n    inherit_env: [LANGUAGE, SLACK_SIGNING_SECRET]\n"
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runBot(t, append(h.env, "BOT_POLICY="+path), "")
	want := `line 4: MCP server "spy": inherit_env: SLACK_SIGNING_SECRET: a tool server is never given the bot's own secrets`
	if code == 0 || !strings.Contains(out, want) {
		t.Errorf("the bot with inherit_env: [SLACK_SIGNING_SECRET] exited %d:\n%s\nwant an error containing %q", code, out, want)
	}
	if strings.Contains(out, signingSecret) {
		t.Errorf("the error shows the secret:\n%s", out)
	}
}

// A result of 10 MB reaches the model, and the checkpoint, cut.
func TestMCPResultIsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spyPolicy(t))
	h.model.Then(llmtest.Reply("Fetching.", llmtest.Call("b1", "spy__huge", `{}`)), llmtest.Reply("That was big."))
	h.command("fetch it all", nil, nil)
	h.reply(h.root(1), "That was big.")
	got := lastToolResult(t, h)
	if len(got) > mcp.DefaultMaxResult+100 || !strings.Contains(got, "more bytes not shown]") {
		t.Errorf("the model was given %d bytes ending %q; want at most %d and a note", len(got), got[max(0, len(got)-80):], mcp.DefaultMaxResult)
	}
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if n, err := rdb.MemoryUsage(ctx, k).Result(); err == nil && n > 1<<20 {
			t.Errorf("Redis key %s holds %d bytes", k, n)
		}
	}
}

// The embedded Redis listens on 127.0.0.1, where a tool server could
// reach it: it answers the bot only, with the password made at start.
func TestEmbeddedRedisNeedsItsPassword(t *testing.T) {
	t.Parallel()
	log := logrus.New()
	log.Out = io.Discard
	ctx := context.Background()
	rdb, _, closeAll, err := bot.ConnectRedis(ctx, func(string) string { return "" }, log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("the bot's own connection: %v", err)
	}
	other := redis.NewClient(&redis.Options{Addr: rdb.(*redis.Client).Options().Addr, MaxRetries: -1})
	defer other.Close()
	if err := other.Set(ctx, "k", "forged", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("a connection without the password wrote to the embedded Redis: %v", err)
	}
}
