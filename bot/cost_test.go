package bot_test

import (
	"bufio"
	"context"
	"io"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// redisCost is what the bot's Redis cost counters say so far, summed
// over operations.
type redisCost struct{ commands, roundTrips, sent, received float64 }

func (c redisCost) minus(o redisCost) redisCost {
	return redisCost{c.commands - o.commands, c.roundTrips - o.roundTrips, c.sent - o.sent, c.received - o.received}
}

// scrapeRedisCost reads the countersign_redis_* counters from the bot's
// /metrics, as Prometheus would, but for the schedule's series: a scrape
// itself reads the waiting calls' total (a schedule command), either
// before or after it reads the counters, while on a single server a turn
// writes its schedule within its session's scripts and sends no schedule
// command of its own.
func scrapeRedisCost(t *testing.T, b *bot.Bot) redisCost {
	t.Helper()
	rec := httptest.NewRecorder()
	b.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var c redisCost
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || strings.Contains(labels, `op="schedule"`) {
			continue
		}
		switch {
		case name == "countersign_redis_commands_total":
			c.commands += v
		case name == "countersign_redis_round_trips_total":
			c.roundTrips += v
		case name == "countersign_redis_bytes_total" && strings.Contains(labels, `direction="sent"`):
			c.sent += v
		case name == "countersign_redis_bytes_total" && strings.Contains(labels, `direction="received"`):
			c.received += v
		}
	}
	return c
}

// slackFront is the Slack front end as the binary wires it (its reporter
// posting cards and answers to a fake Slack), which also keeps the last
// card, for the approver to click.
type slackFront struct {
	*handlers.Reporter
	last atomic.Pointer[runner.Event]
}

func (f *slackFront) Report(ctx context.Context, e runner.Event) error {
	if e.Kind == runner.ApprovalNeeded {
		f.last.Store(&e)
	}
	return f.Reporter.Report(ctx, e)
}

// TestLongThreadCostsWhatChanged: a long thread costs Redis what its turn
// changed, not what the thread holds. Through the bot's wiring and its
// Slack reporter, one thread grows to 30 turns, each a whole approval
// cycle (reply → card → approve → tool → answer), and the bot's own Redis
// cost counters say that turn 30 sent and read no more than 1.5× the
// bytes of turn 2, and sent no more than 1.2× its commands and at most
// 16. (Counts and bytes, not timings: exact whatever the machine's load.)
func TestLongThreadCostsWhatChanged(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	if os.Getenv("REDIS_URL") == "" {
		t.Skip("REDIS_URL is not set")
	}
	const turns = 30
	ctx := context.Background()
	front := &slackFront{}
	b, sl, calls := deployBot(t, "bot-cost-"+randomHex(), func(r *handlers.Reporter) runner.Reporter {
		front.Reporter = r
		return front
	})

	const team, channel = "T0TEAM", "C0CHANNEL"
	thread := slackui.ThreadKey(team, channel, "1700000000.000100")
	cost := map[int]redisCost{}
	for turn := 1; turn <= turns; turn++ {
		before := scrapeRedisCost(t, b)
		text := "ship v2, turn " + strconv.Itoa(turn)
		var err error
		if turn == 1 {
			err = b.Runner.Start(ctx, runner.StartRequest{Thread: thread, Requester: "U0ALICE", Team: team, Channel: channel, Text: text})
		} else {
			err = b.Runner.Reply(ctx, runner.Message{Thread: thread, Team: team, Channel: channel, By: "U0ALICE", Text: text})
		}
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		card := front.last.Swap(nil)
		if card == nil {
			t.Fatalf("turn %d: no card was posted", turn)
		}
		c := card.Call
		err = b.Runner.Decide(ctx, runner.Decision{Thread: thread, Call: c.Key, Round: c.Attempts, Hash: c.RunHash(),
			Team: team, Channel: channel, By: "U0BOB", Kind: agent.Approve})
		if err != nil {
			t.Fatalf("turn %d: Decide: %v", turn, err)
		}
		if err := b.Runner.Drive(ctx, thread); err != nil {
			t.Fatalf("turn %d: Drive: %v", turn, err)
		}
		if n := calls.Load(); n != int64(turn) {
			t.Fatalf("after turn %d deploy ran %d times, want %d", turn, n, turn)
		}
		cost[turn] = scrapeRedisCost(t, b).minus(before)
	}
	if got := len(sl.CallsTo("chat.update")); got < turns {
		t.Errorf("%d card updates in %d turns: the front end did not redraw the cards", got, turns)
	}
	second, last := cost[2], cost[turns]
	t.Logf("turn 2: %+v; turn %d: %+v", second, turns, last)
	if last.commands > 1.2*second.commands || last.commands > 16 {
		t.Errorf("commands at turn %d = %.0f, turn 2 = %.0f; want ≤ 1.2× and ≤ 16", turns, last.commands, second.commands)
	}
	if last.sent > 1.5*second.sent {
		t.Errorf("bytes sent at turn %d = %.0f, turn 2 = %.0f; want ≤ 1.5×", turns, last.sent, second.sent)
	}
	if last.received > 1.5*second.received {
		t.Errorf("bytes received at turn %d = %.0f, turn 2 = %.0f; want ≤ 1.5×", turns, last.received, second.received)
	}
}

// deployBot is the bot's wiring (bot.New) with its Slack reporter on a
// fake Slack, a model that asks for deploy v2 at every turn, and a deploy
// tool that counts its runs. wrap, if not nil, wraps the reporter.
func deployBot(t *testing.T, prefix string, wrap func(*handlers.Reporter) runner.Reporter) (*bot.Bot, *slacktest.Server, *atomic.Int64) {
	t.Helper()
	sl := slacktest.NewServer(t)
	api := slack.New("xoxb-test", slack.OptionAPIURL(sl.URL()))
	log := logrus.New()
	log.Out = io.Discard
	policy, err := tools.ParsePolicy([]byte("tools:\n  deploy: {approval: required}\n"))
	if err != nil {
		t.Fatal(err)
	}
	model := &agenttest.Planner{Plan: func(string) []llm.ToolCall {
		return []llm.ToolCall{{Name: "deploy", Arguments: `{"version":"v2"}`}}
	}}
	calls := new(atomic.Int64)
	b, err := bot.New(context.Background(), os.Getenv, log, func(store *redisstore.Store) runner.Reporter {
		r := handlers.NewReporter(api, store, nil, log)
		if wrap != nil {
			return wrap(r)
		}
		return r
	}, bot.Options{Model: model, Policy: policy, Tools: []tools.Tool{deployTool{calls}}, Prefix: prefix})
	if err != nil {
		t.Fatalf("bot.New: %v", err)
	}
	t.Cleanup(b.Close)
	return b, sl, calls
}
