package main

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
)

// SIGTERM twice while a tool call hangs: the first starts the drain, the
// second ends the process at once instead of after the grace period, and
// says so. The call is not run again: the next process finds its outcome
// unknown and asks, as after a crash.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.target.HoldNext("POST /slow") // never answered: the drain would wait out its grace
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/slow", "v2")))
	h.command("deploy", nil, nil)
	root := h.root(1)
	h.click(h.cards(root, 1)[0], "approve", approver)
	<-h.target.Arrived

	if err := h.bot.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	h.eventually(func() bool { return strings.Contains(h.logs.String(), "shutting down") }, "the drain to begin")
	exited := make(chan error, 1)
	go func() { exited <- h.bot.Wait() }()
	// The second signal, repeated: one that comes right after the first
	// is taken for the first sent twice. Well inside the drain's grace
	// (shutdownGrace), which the held call would otherwise use up.
	deadline := time.After(shutdownGrace / 2)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err := <-exited:
			if err == nil {
				t.Error("the bot exited 0 after a second signal cut its drain short; want status 1")
			}
			break wait
		case <-tick.C:
			_ = h.bot.Process.Signal(syscall.SIGTERM)
		case <-deadline:
			t.Fatalf("the bot still drained %v after a second SIGTERM; logs:\n%s", shutdownGrace/2, h.logs.String())
		}
	}
	h.bot = nil
	if logs := h.logs.String(); !strings.Contains(logs, "terminated again: stopping now") {
		t.Errorf("no line saying the second signal stopped the bot; logs:\n%s", logs)
	}

	h.start()
	h.cardWith(root, "mark_done", 60*time.Second)
	if n := h.target.Count("POST /slow"); n != 1 {
		t.Errorf("the cut-off call ran %d times, want 1 (its outcome is asked about, not guessed)", n)
	}
}

// The same SIGTERM delivered twice at once, as timeout(1) does (to the
// process, then to its group), is one signal: the bot drains, the call in
// flight finishes, and the run goes on in the next process.
func TestDoubledSignalStillDrains(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(
		llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/slow", "v2")),
		llmtest.Reply("Deployed."),
	)
	h.target.Delay("/slow", 2*time.Second)
	h.command("deploy", nil, nil)
	root := h.root(1)
	h.click(h.cards(root, 1)[0], "approve", approver)
	h.eventually(func() bool { return h.target.Count("POST /slow") == 1 }, "the call to start")
	for range 2 {
		if err := h.bot.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.bot.Wait(); err != nil {
		t.Errorf("bot exited with %v after one SIGTERM sent twice, want a clean drain", err)
	}
	h.bot = nil
	if logs := h.logs.String(); strings.Contains(logs, "again: stopping now") {
		t.Errorf("the bot took a doubled SIGTERM for a second one; logs:\n%s", logs)
	}
	h.start()
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /slow"); n != 1 {
		t.Errorf("the call ran %d times, want 1", n)
	}
}

// A port in use is one line that names BOT_ADDR, said before the bot
// starts anything else, and never after a line saying it serves.
func TestServeOnAPortInUse(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	slack := slacktest.NewServer(t)
	out, code := runBot(t, []string{
		"SLACK_BOT_TOKEN=" + botToken, "SLACK_SIGNING_SECRET=" + signingSecret, "SLACK_API_URL=" + slack.URL(),
		"REDIS_URL=redis://127.0.0.1:1/0", // never asked: the address comes first
		"BOT_ADDR=" + taken.Addr().String(),
	}, "", "serve")
	if code != 1 || !strings.Contains(out, "address already in use") || !strings.Contains(out, "set BOT_ADDR") {
		t.Errorf("bot serve on a port in use (exit %d):\n%s\nwant exit 1 and a line that names BOT_ADDR", code, out)
	}
	if strings.Contains(out, "serving Slack") || strings.Contains(out, "redis") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("bot serve on a port in use said more than the one line, or claimed to serve:\n%s", out)
	}
}

// A BOT_ADDR that is no address (a bare port, a URL) is said so, with
// how to write one, by serve and the playground alike: not "set BOT_ADDR
// to another address", as for a port in use.
func TestBadBotAddrSaysHowToWriteIt(t *testing.T) {
	t.Parallel()
	slack := slacktest.NewServer(t)
	for _, addr := range []string{"3000", "http://127.0.0.1:3000"} {
		for _, cmd := range []string{"serve", "playground"} {
			out, code := runBot(t, []string{
				"SLACK_BOT_TOKEN=" + botToken, "SLACK_SIGNING_SECRET=" + signingSecret, "SLACK_API_URL=" + slack.URL(),
				"REDIS_URL=redis://127.0.0.1:1/0", // never asked: the address comes first
				"BOT_ADDR=" + addr,
			}, "", cmd)
			if code != 1 || !strings.Contains(out, "address "+addr) || !strings.Contains(out, "BOT_ADDR is host:port or :port, e.g. 127.0.0.1:3000") ||
				strings.Contains(out, "another address") {
				t.Errorf("bot %s with BOT_ADDR=%s (exit %d):\n%s\nwant exit 1, the address, and how to write one", cmd, addr, code, out)
			}
		}
	}
}

// A bot token Slack refuses stops the bot with one line that names
// SLACK_BOT_TOKEN and where the right one is, without the token.
func TestRefusedBotTokenSaysWhich(t *testing.T) {
	t.Parallel()
	slack := slacktest.NewServer(t)
	slack.FailNext("auth.test", "invalid_auth", 1)
	out, code := runBot(t, []string{
		"SLACK_BOT_TOKEN=xoxb-wrong-s3cr3t", "SLACK_SIGNING_SECRET=" + signingSecret, "SLACK_API_URL=" + slack.URL(),
		"REDIS_URL=redis://127.0.0.1:1/0", // never asked: Slack is
		"BOT_ADDR=127.0.0.1:0",
	}, "", "serve")
	if code != 1 || !strings.Contains(out, "Slack refused SLACK_BOT_TOKEN (invalid_auth)") || !strings.Contains(out, "Bot User OAuth Token") {
		t.Errorf("bot serve with a refused token (exit %d):\n%s\nwant exit 1 and a line naming SLACK_BOT_TOKEN", code, out)
	}
	if strings.Contains(out, "s3cr3t") {
		t.Errorf("bot serve printed the token:\n%s", out)
	}
}
