package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
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

// intakeBed is a bot's wiring on a real Redis and the fake Slack, with a
// clock the test moves and a model that keeps the request "block" waiting
// until the test lets it go — holding a background slot meanwhile.
type intakeBed struct {
	t      *testing.T
	rdb    *redisstore.Store
	client redis.UniversalClient // what rdb reaches Redis with
	fake   *slacktest.Server
	signer slacktest.Signer
	mu     sync.Mutex
	now    time.Time
	// blocked is closed when the model is asked "block"; unblock lets
	// it answer. With blockAgain, a second ask (another replica starting
	// the same request again, its hold lapsed in the bed's time) waits
	// as well, rather than fail that run.
	blockAgain  bool
	blocked     chan struct{}
	unblock     chan struct{}
	blockOnce   sync.Once
	blockedOnce sync.Once
	prefix      string
	// plan, if set, is told each request the model reads.
	plan func(text string)
	// calls, if set, are the tool calls the model makes for a request.
	calls func(text string) []llm.ToolCall
}

func newIntakeBed(t *testing.T) *intakeBed {
	b := &intakeBed{t: t, fake: slacktest.NewServer(t), signer: slacktest.NewSigner(gateSecret), now: time.Now(),
		blocked: make(chan struct{}), unblock: make(chan struct{}), prefix: fmt.Sprintf("intake-%d", time.Now().UnixNano())}
	b.client = redistest.Client(t)
	b.rdb = redisstore.New(b.client, redisstore.Options{Prefix: b.prefix})
	t.Cleanup(func() { b.release() })
	return b
}

func (b *intakeBed) clock() time.Time { b.mu.Lock(); defer b.mu.Unlock(); return b.now }

func (b *intakeBed) advance(d time.Duration) { b.mu.Lock(); b.now = b.now.Add(d); b.mu.Unlock() }

func (b *intakeBed) release() {
	b.blockOnce.Do(func() { close(b.unblock) })
}

// dueCounter is the store as the server sees it, counting the intake's
// looks for lapsed requests and its renewals of holds.
type dueCounter struct {
	*redisstore.Store
	looks, renewals atomic.Int64
}

func (d *dueCounter) HoldIntake(ctx context.Context, holds map[string]string, until time.Time) (map[string]bool, error) {
	defer d.renewals.Add(1)
	return d.Store.HoldIntake(ctx, holds, until)
}

func (d *dueCounter) DueIntake(ctx context.Context, token string, now, until time.Time, n int) (map[string][]byte, error) {
	defer d.looks.Add(1)
	return d.Store.DueIntake(ctx, token, now, until, n)
}

// bedPolicy is the bed's policy: a deploy only U0BOB may approve, a
// lookup that needs no approval.
const bedPolicy = "tools:\n  deploy: {approval: required, approvers: [U0BOB]}\n  lookup: {approval: never}\n"

// replica is one bot process: its runner, its server with slots
// background slots, and its HTTP front.
type replica struct {
	svc   *runner.Service
	srv   *handlers.Server
	store *dueCounter
	web   *httptest.Server
	stop  func() // ends its RunIntake, if running
}

func (b *intakeBed) replica(slots int) *replica {
	t := b.t
	model := &agenttest.Planner{Plan: func(text string) []llm.ToolCall {
		if b.plan != nil {
			b.plan(text)
		}
		if text == "block" {
			if b.blockAgain {
				b.blockedOnce.Do(func() { close(b.blocked) })
			} else {
				close(b.blocked)
			}
			<-b.unblock
		}
		if b.calls != nil {
			return b.calls(text)
		}
		return nil
	}}
	policy, err := tools.ParsePolicy([]byte(bedPolicy))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, &agenttest.Tool{ToolName: "deploy", NotIdempotent: true}, &agenttest.Tool{ToolName: "lookup"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(model, reg, b.rdb, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	api := slack.New("xoxb-test", slack.OptionAPIURL(b.fake.URL()))
	r := &replica{store: &dueCounter{Store: b.rdb}, stop: func() {}}
	r.svc = runner.New(a, b.rdb, handlers.NewReporter(api, b.rdb, nil, nil), runner.Options{})
	r.srv = handlers.New(api, r.svc, r.store, gateSecret, handlers.Options{BotUserID: slacktest.BotUserID, Now: b.clock, MaxConcurrentWork: slots})
	r.web = httptest.NewServer(r.srv.Handler())
	t.Cleanup(r.web.Close)
	t.Cleanup(func() { r.stop() })
	return r
}

// runIntake starts the replica's intake loop.
func (r *replica) runIntake() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.srv.RunIntake(ctx, 2*time.Millisecond) }()
	r.stop = func() { cancel(); <-done }
}

// command sends "/agent text" to r.
func (b *intakeBed) command(r *replica, text string) {
	b.t.Helper()
	body := slacktest.SlashCommand(url.Values{"text": {text}, "user_id": {gateRequester}})
	b.send(r, "/slack/commands", "application/x-www-form-urlencoded", body)
}

// reply sends a reply in the thread of root to r.
func (b *intakeBed) reply(r *replica, root, text string) {
	b.t.Helper()
	body := slacktest.EventCallback("", map[string]any{"type": "message", "channel": slacktest.ChannelID, "user": gateRequester,
		"text": text, "ts": fmt.Sprintf("%d.%06d", time.Now().Unix(), time.Now().Nanosecond()/1000), "thread_ts": root})
	b.send(r, "/slack/events", "application/json", body)
}

func (b *intakeBed) send(r *replica, path, contentType string, body []byte) {
	b.t.Helper()
	resp, err := http.DefaultClient.Do(b.signer.Request(http.MethodPost, r.web.URL+path, contentType, body, b.clock()))
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("%s answered %d, want 200", path, resp.StatusCode)
	}
}

// roots returns the root messages posted for each request, by its text.
func (b *intakeBed) roots() map[string][]string {
	out := map[string][]string{}
	for _, c := range b.fake.CallsTo("chat.postMessage") {
		if c.ThreadTS == "" && c.OK() {
			if _, text, ok := strings.Cut(c.Text, " asked: "); ok {
				out[text] = append(out[text], c.TS)
			}
		}
	}
	return out
}

// until waits for cond, failing with what after 60 seconds.
func (b *intakeBed) until(what string, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// turns counts the person's messages in thread that read text.
func turns(t *testing.T, svc *runner.Service, thread, text string) int {
	res, err := svc.State(context.Background(), thread)
	if err != nil {
		return 0
	}
	n := 0
	for _, m := range res.State.Messages {
		if m.Role == llm.RoleUser && m.Content == text {
			n++
		}
	}
	return n
}

// TestQueuedPastTheRetryAgeIsCarriedOnOnce: a burst of /agent commands
// and thread replies meets a server with one background slot, taken by a
// conversation that does not finish; the others wait for it far past the
// intake's retry age, while the intake loop runs. Each request still
// gets one root message and one conversation, and each reply is one turn
// — the loop does not drive again a request this process still has
// queued.
func TestQueuedPastTheRetryAgeIsCarriedOnOnce(t *testing.T) {
	t.Parallel()
	b := newIntakeBed(t)
	r := b.replica(1)
	ctx := context.Background()

	// Finished conversations to reply in.
	const replies = 5
	threads := make([]string, replies)
	for i := range threads {
		threads[i] = slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, fmt.Sprintf("1700000300.%06d", time.Now().UnixNano()%1000000+int64(i)))
		if err := r.svc.Start(ctx, runner.StartRequest{Thread: threads[i], Requester: gateRequester, Team: slacktest.TeamID,
			Channel: slacktest.ChannelID, Text: "hello"}); err != nil {
			t.Fatal(err)
		}
	}

	b.command(r, "block")
	<-b.blocked // the only slot is taken
	const commands = 20
	for i := range commands {
		b.command(r, fmt.Sprintf("request %d", i))
	}
	for i, thread := range threads {
		_, _, root, _ := slackui.ParseThread(thread)
		b.reply(r, root, fmt.Sprintf("reply %d", i))
	}

	// Far past the retry age, the intake loop looks again and again.
	b.advance(time.Minute)
	r.runIntake()
	looks := r.store.looks.Load()
	b.until("the intake loop looks for lapsed requests", func() bool { return r.store.looks.Load() >= looks+5 })
	b.advance(time.Minute)
	looks = r.store.looks.Load()
	b.until("the intake loop looks for lapsed requests again", func() bool { return r.store.looks.Load() >= looks+5 })

	b.release()
	b.until("every request is carried on", func() bool {
		n, err := b.rdb.PendingIntake(ctx)
		return err == nil && n == 0
	})
	r.stop()
	if err := r.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	roots := b.roots()
	for i := range commands {
		text := fmt.Sprintf("request %d", i)
		if len(roots[text]) != 1 {
			t.Errorf("%q has %d root messages, want 1", text, len(roots[text]))
		}
		for _, ts := range roots[text] {
			if n := turns(t, r.svc, slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, ts), text); n != 1 {
				t.Errorf("the thread of %q (root %s) ran it %d times, want once", text, ts, n)
			}
		}
	}
	for i, thread := range threads {
		if n := turns(t, r.svc, thread, fmt.Sprintf("reply %d", i)); n != 1 {
			t.Errorf("reply %d is %d turns of its conversation, want 1", i, n)
		}
	}
}

// TestHeldRequestOfADeadReplicaIsCarriedOnOnce: replica A accepts
// "/agent deploy" and a thread reply, which wait for A's only slot; A
// stops renewing its holds (its intake loop is gone, as in a process that
// hangs or dies). Replica B's intake carries both on once their holds
// lapse. When A's queued attempts finally run, they find the requests are
// no longer theirs: one root message, one conversation, one turn for the
// reply.
func TestHeldRequestOfADeadReplicaIsCarriedOnOnce(t *testing.T) {
	t.Parallel()
	b := newIntakeBed(t)
	a := b.replica(1)
	other := b.replica(4)
	ctx := context.Background()
	thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, fmt.Sprintf("1700000400.%06d", time.Now().UnixNano()%1000000))
	if err := other.svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: gateRequester, Team: slacktest.TeamID,
		Channel: slacktest.ChannelID, Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	_, _, root, _ := slackui.ParseThread(thread)

	b.command(a, "block")
	<-b.blocked
	b.command(a, "deploy")
	b.reply(a, root, "and the docs")

	b.advance(time.Minute)
	other.runIntake()
	b.until("B carries the request on", func() bool {
		ts := b.roots()["deploy"]
		return len(ts) == 1 && turns(t, other.svc, slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, ts[0]), "deploy") == 1 &&
			turns(t, other.svc, thread, "and the docs") == 1
	})
	other.stop()
	if err := other.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	b.release() // A's queued attempt runs
	if err := a.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	roots := b.roots()
	if len(roots["deploy"]) != 1 {
		t.Fatalf("%d root messages for the request, want 1", len(roots["deploy"]))
	}
	if n := turns(t, a.svc, slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, roots["deploy"][0]), "deploy"); n != 1 {
		t.Errorf("the conversation ran the request %d times, want once", n)
	}
	if n := turns(t, a.svc, thread, "and the docs"); n != 1 {
		t.Errorf("the reply is %d turns of its conversation, want 1", n)
	}
	if len(roots["block"]) != 1 {
		t.Errorf("%d root messages for the first request, want 1", len(roots["block"]))
	}
}

// TestHoldRenewedOnlyWhenItMustBe: a reply taken up at once goes to the
// runner under the hold its acceptance took, with no renewal; one that
// waited for a slot longer than a fresh hold is counted on is renewed
// before it is handed on. Each is one turn.
func TestHoldRenewedOnlyWhenItMustBe(t *testing.T) {
	t.Parallel()
	b := newIntakeBed(t)
	r := b.replica(1)
	ctx := context.Background()
	var roots [2]string
	for i := range roots {
		roots[i] = fmt.Sprintf("1700000500.%06d", time.Now().UnixNano()%1000000+int64(i))
		thread := slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, roots[i])
		if err := r.svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: gateRequester, Team: slacktest.TeamID,
			Channel: slacktest.ChannelID, Text: "hello"}); err != nil {
			t.Fatal(err)
		}
	}
	settled := func() bool { n, err := b.rdb.PendingIntake(ctx); return err == nil && n == 0 }
	thread := func(i int) string { return slackui.ThreadKey(slacktest.TeamID, slacktest.ChannelID, roots[i]) }

	b.reply(r, roots[0], "at once")
	b.until("the reply is carried on", func() bool { return settled() && turns(t, r.svc, thread(0), "at once") == 1 })
	if n := r.store.renewals.Load(); n != 0 {
		t.Errorf("a reply taken up at once renewed its hold %d times, want none", n)
	}

	b.command(r, "block")
	<-b.blocked // the only slot is taken
	b.reply(r, roots[1], "after a wait")
	b.advance(6 * time.Second) // longer than a fresh hold is counted on
	b.release()
	b.until("the queued reply is carried on", func() bool { return settled() && turns(t, r.svc, thread(1), "after a wait") == 1 })
	if n := r.store.renewals.Load(); n == 0 {
		t.Error("a reply that waited for a slot was handed on without renewing its hold")
	}
	if n := turns(t, r.svc, thread(0), "at once"); n != 1 {
		t.Errorf("the first reply is %d turns, want 1", n)
	}
}
