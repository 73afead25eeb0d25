package handlers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// The test below runs a real process: this test binary, started again
// with KEPT_CHILD set, plays the replica that starts a conversation.
func TestMain(m *testing.M) {
	if os.Getenv("KEPT_CHILD") != "" {
		os.Exit(keptChild())
	}
	os.Exit(m.Run())
}

// stuckLookup is a lookup that says so on stdout and never returns: the
// parent kills the process while it runs.
type stuckLookup struct{ agenttest.Tool }

func (l *stuckLookup) Call(context.Context, json.RawMessage) (string, error) {
	fmt.Println("SAVED")
	select {}
}

// keptChild is a replica whose start asks for a lookup, which needs no
// approval: the run's first save marks the lookup running and does not
// end the session. It prints its address, then ASKED when the model is
// asked for the request, waits for a line on stdin before the model
// answers, and prints SAVED once the first save is made.
func keptChild() int {
	store := redisstore.New(redis.NewClient(&redis.Options{Addr: os.Getenv("KEPT_REDIS")}), redisstore.Options{Prefix: os.Getenv("KEPT_PREFIX")})
	in := bufio.NewReader(os.Stdin)
	model := &agenttest.Planner{Plan: func(text string) []llm.ToolCall {
		if text != "block" {
			return nil
		}
		fmt.Println("ASKED")
		_, _ = in.ReadString('\n')
		return []llm.ToolCall{{Name: "lookup", Arguments: `{}`}}
	}}
	policy, err := tools.ParsePolicy([]byte(bedPolicy))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	reg, err := tools.NewRegistry(policy, &agenttest.Tool{ToolName: "deploy", NotIdempotent: true}, &stuckLookup{agenttest.Tool{ToolName: "lookup"}})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	a, err := agent.New(model, reg, store, agent.Options{})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	api := slack.New("xoxb-test", slack.OptionAPIURL(os.Getenv("KEPT_SLACK")))
	svc := runner.New(a, store, handlers.NewReporter(api, store, nil, nil), runner.Options{LeaseTTL: 5 * time.Second})
	srv := handlers.New(api, svc, store, gateSecret, handlers.Options{BotUserID: slacktest.BotUserID, MaxConcurrentWork: 2})
	web := httptest.NewServer(srv.Handler())
	fmt.Println("ADDR", web.URL)
	select {}
}

// TestKeptReplyOfAKilledStartIsAppliedOnce: a replica starts a
// conversation; a reply typed while its model works is kept for the
// first save, which marks a lookup running without ending the session
// and hands the reply over; the replica is killed (SIGKILL) right after
// it. The reply's request stayed due: another replica carries the run on
// and, once the request is due, the reply, as any reply — one turn, one
// answer in the thread.
func TestKeptReplyOfAKilledStartIsAppliedOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a second process")
	}
	b := newIntakeBed(t)
	ctx := context.Background()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEPT_CHILD=1", "KEPT_REDIS="+redistest.Options(t).Addr, "KEPT_PREFIX="+b.prefix, "KEPT_SLACK="+b.fake.URL())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewReader(stdout)
	line := func() string {
		t.Helper()
		l, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("the replica said nothing more: %v", err)
		}
		return strings.TrimSpace(l)
	}
	addr, ok := strings.CutPrefix(line(), "ADDR ")
	if !ok {
		t.Fatal("the replica did not say where it listens")
	}
	victim := &replica{web: &httptest.Server{URL: addr}}
	heir := b.replica(2)

	b.command(victim, "block")
	if l := line(); l != "ASKED" {
		t.Fatalf("the replica said %q, want ASKED", l)
	}
	root := b.roots()["block"][0]
	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, root)
	b.replyKept(heir, root, gateRequester, "and more")
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	if l := line(); l != "SAVED" {
		t.Fatalf("the replica said %q, want SAVED (its first save, which keeps the session)", l)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if n, err := b.client.Exists(ctx, b.prefix+":{"+thread+"}:kept").Result(); err != nil || n != 0 {
		t.Fatalf("kept replies after the first save: %d keys, %v; want them handed over", n, err)
	}
	// The killed replica's lease ends, as its lapse would.
	if n, err := b.client.Del(ctx, b.prefix+":{"+thread+"}:lease").Result(); err != nil || n != 1 {
		t.Fatalf("ending the killed replica's lease: %d keys, %v", n, err)
	}

	b.release()
	if err := heir.svc.Drive(ctx, thread); err != nil {
		t.Fatal(err)
	}
	b.advance(runner.KeptReplyTTL + time.Minute)
	heir.runIntake()
	b.until("the kept reply is answered", func() bool {
		n, err := b.rdb.PendingIntake(ctx)
		return err == nil && n == 0 && len(answers(b, root, "You said: and more")) > 0
	})
	heir.stop()
	if err := heir.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	keptReplyTaken(t, b, heir.svc, root, thread, 1)
}
