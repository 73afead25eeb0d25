package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// The tests below run two bot processes on a Redis Cluster of three
// masters with a replica each, and fail the master of a conversation's
// slot over — by CLUSTER FAILOVER, as an operator does, and by killing
// it — at the moments where a failover used to cost a conversation: while
// a run ends its step and lets the thread go, while a thread reply is
// taken in, and while an Approve click is claimed. Each waits for the
// moment by what the bot does (a Slack call held, a state reached), never
// for time, and checks what the people in the thread see.

// leasePeriod is the runner's lease (runner.Options.LeaseTTL's default):
// a conversation must recover from a failover within two of them.
const leasePeriod = 10 * time.Second

// failoverKinds are the two ways a master goes away.
var failoverKinds = []struct {
	name string
	kill bool
}{{"CLUSTER FAILOVER", false}, {"master killed", true}}

// The failover tests run in two lanes, each a parallel test that runs
// its scenarios one after another: at most two at a time, as each has a
// cluster of six nodes and two bot processes of its own, and none of
// them holds one of the package's parallel slots (go test -parallel)
// while it waits for its turn, which a scenario waiting on a semaphore
// of its own did, leaving the other tests fewer slots for as long as
// the failovers lasted. What they wait for is the cluster's election (a
// node unanswered for its cluster-node-timeout, 2 s) and the lease of
// the thread's last holder; the time a conversation is given to recover
// is counted from the end of the failover, and measured for a busy
// machine. The lanes take about as long as each other: the comments
// give each scenario's time in three runs of the two lanes alone
// (-race, a shared 2-core machine); beside the package's other tests
// they take longer. One scenario alone: go test -run
// 'TestFailoverLane./DuringAClaim'.
var failoverLanes = [2][]failoverScenario{
	{
		{"LosesNoAcknowledgedRequest", failoverLosesNoAcknowledgedRequestTest}, // 20-21 s
		{"DuringAClose", failoverDuringACloseTest},                             // 21-27 s
		{"DuringAClaim", failoverDuringAClaimTest},                             // 16-19 s
		{"OfARunningSaveNoReplicaHas", failoverOfARunningSaveNoReplicaHasTest}, // 12-14 s
	},
	{
		{"OfAClaimNoReplicaHas", failoverOfAClaimNoReplicaHasTest},                   // 18-19 s
		{"DuringAReplysIntake", failoverDuringAReplysIntakeTest},                     // 19-21 s
		{"AuditHeadNotedIsOneAFailoverKeeps", auditHeadNotedIsOneAFailoverKeepsTest}, // 15 s
		{"OfAReplyKeptDuringTheStart", failoverOfAReplyKeptDuringTheStartTest},       // 7-8 s
		{"KeepsAWaitingCallInTheInbox", failoverKeepsAWaitingCallInTheInboxTest},     // 7 s
	},
}

type failoverScenario struct {
	name string
	run  func(t *testing.T)
}

func TestFailoverLane1(t *testing.T) { runFailoverLane(t, failoverLanes[0]) }
func TestFailoverLane2(t *testing.T) { runFailoverLane(t, failoverLanes[1]) }

func runFailoverLane(t *testing.T, lane []failoverScenario) {
	t.Parallel()
	for _, sc := range lane {
		t.Run(sc.name, sc.run)
	}
}

// newClusterHarness is newHarness on a Redis Cluster with replicas, as
// an operator configures it: REDIS_CLUSTER=true and a cluster URL
// naming every node as a seed; env is added to the bot's environment.
func newClusterHarness(t *testing.T, env ...string) (*harness, *redistest.ReplicatedCluster) {
	t.Helper()
	cluster := redistest.ClusterWithReplicas(t)
	h := &harness{
		t:      t,
		slack:  slacktest.NewServer(t),
		model:  llmtest.NewOpenAIServer(t),
		target: newTarget(t),
		signer: slacktest.NewSigner(signingSecret),
		addr:   freeAddr(t),
		logs:   &syncBuffer{},
	}
	addrs := cluster.Addrs()
	h.env = []string{
		"PATH=" + os.Getenv("PATH"),
		goRace,
		"SLACK_BOT_TOKEN=" + botToken,
		"SLACK_SIGNING_SECRET=" + signingSecret,
		"SLACK_API_URL=" + h.slack.URL(),
		"REDIS_URL=redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr="),
		"REDIS_CLUSTER=true",
		"LLM_PROVIDER=openai",
		"OPENAI_API_KEY=test-key",
		"OPENAI_BASE_URL=" + h.model.URL(),
		"BOT_ADDR=" + h.addr,
		"LOG_FORMAT=json",
		"LOG_LEVEL=debug",
	}
	h.env = append(h.env, env...)
	t.Cleanup(func() {
		h.stop()
		if t.Failed() {
			t.Logf("bot logs:\n%s", h.logs.String())
		}
	})
	h.start()
	return h, cluster
}

// threadKey is a Redis key in root's thread's slot.
func threadKey(root slacktest.Call) string {
	return "cs:{" + slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS) + "}:head"
}

// within waits, up to d, until cond holds.
func (h *harness) within(d time.Duration, cond func() bool, format string, args ...any) {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out after %v waiting for "+format, append([]any{d}, args...)...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recovered waits, with a deadline generous for a busy machine, until
// the thread shows want, and fails the test if that took more than two
// lease periods from since (the end of the failover).
func (h *harness) recovered(root slacktest.Call, want string, since time.Time) {
	h.t.Helper()
	h.within(6*leasePeriod, func() bool { return h.answers(root, want) > 0 }, "%q in the thread", want)
	if took := time.Since(since); took > 2*leasePeriod {
		h.t.Errorf("the conversation recovered %v after the failover; want within two lease periods (%v)", took.Round(time.Millisecond), 2*leasePeriod)
	}
}

// answers counts the thread's messages whose text is want.
func (h *harness) answers(root slacktest.Call, want string) int {
	n := 0
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if strings.TrimSpace(c.Text) == want {
			n++
		}
	}
	return n
}

// noStorageErrors fails the test if a message of root's thread, as it
// reads now, shows a storage error or asks to try again.
func (h *harness) noStorageErrors(root slacktest.Call) {
	h.t.Helper()
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		text := strings.ToLower(h.card(c))
		for _, bad := range []string{"moved", "clusterdown", "try again", "tryagain", "connection refused"} {
			if strings.Contains(text, bad) {
				h.t.Errorf("after recovery the thread still shows %q: %s", bad, h.card(c))
			}
		}
	}
}

// eventWithRetries sends an Events API event as Slack does: again, with
// X-Slack-Retry-Num, while the bot answers with an error, at most three
// times more. Slack's last retry comes minutes after the first send, when
// a failover is long over: it is sent once settled (the cluster has its
// new master) has returned, however long that took.
func (h *harness) eventWithRetries(eventID string, ev map[string]any, settled func()) {
	h.t.Helper()
	body := slacktest.EventCallback(eventID, ev)
	for retry := 0; retry <= 3; retry++ {
		if retry == 3 {
			settled()
		}
		var header http.Header
		if retry > 0 {
			header = http.Header{"X-Slack-Retry-Num": {strconv.Itoa(retry)}, "X-Slack-Retry-Reason": {"http_error"}}
		}
		resp := h.send("/slack/events", "application/json", body, header)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		h.t.Logf("the event was answered %d; Slack sends it again", resp.StatusCode)
		time.Sleep(time.Second) // Slack's own pace, not a wait for a state
	}
	h.t.Fatalf("the bot never acknowledged event %s", eventID)
}

// (a) The run that posts the approval card then saves the pause and
// lets the thread go; the thread's master fails over as it does. The
// card is decided once the cluster has its new master, and the call runs
// once.
func failoverDuringACloseTest(t *testing.T) {
	for _, kind := range failoverKinds {
		t.Run(kind.name, func(t *testing.T) { failoverDuringAClose(t, kind.kill, nil) })
	}
}

// observer, if not nil, is called as a failover scenario's test ends,
// failed or not, with its harness and the conversation's root message,
// before the bot is stopped.
type observer func(h *harness, root slacktest.Call)

func failoverDuringAClose(t *testing.T, kill bool, observe observer) {
	h, cluster := newClusterHarness(t)
	other := h.replica()
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")), llmtest.Reply("Deployed."))
	// The card is the last thing the run posts before it saves the
	// pause and closes: hold it, fail over, let it go.
	cardPosted, release := h.slack.HoldNext("chat.postMessage", 1) // the root, then the card
	defer release()
	h.command("deploy", nil, nil)
	root := h.root(1)
	h.observeWith(observe, root)
	h.within(30*time.Second, func() bool {
		select {
		case <-cardPosted:
			return true
		default:
			return false
		}
	}, "the card to be posted")
	done := cluster.StartFailover(t, threadKey(root), kill)
	release()
	done()
	since := time.Now()

	card := h.cards(root, 1)[0]
	h.approveOnceItTakes(other, card, false)
	h.recovered(root, "Deployed.", since)
	h.settled(root, "Deployed.")
}

// observeWith has observe called as the test ends (see observer).
func (h *harness) observeWith(observe observer, root slacktest.Call) {
	if observe != nil {
		h.t.Cleanup(func() { observe(h, root) })
	}
}

// (b) A reply in the thread of a finished conversation arrives while
// the thread's master fails over: it is acknowledged (Slack sends it
// again while it is not), and carried on exactly once.
func failoverDuringAReplysIntakeTest(t *testing.T) {
	for i, kind := range failoverKinds {
		t.Run(kind.name, func(t *testing.T) { failoverDuringAReplysIntake(t, kind.kill, i, nil) })
	}
}

// theQuestion is the reply failoverDuringAReplysIntake sends.
const theQuestion = "how many people live there?"

func failoverDuringAReplysIntake(t *testing.T, kill bool, i int, observe observer) {
	h, cluster := newClusterHarness(t)
	h.replica()
	h.model.Then(llmtest.Reply("The capital of France is Paris."), llmtest.Reply("About 2.1 million people."))
	h.command("what is the capital of France?", nil, nil)
	root := h.root(1)
	h.observeWith(observe, root)
	h.reply(root, "Paris")
	h.waitStatusOnCluster(root, "done")

	done := sync.OnceValue(cluster.StartFailover(t, threadKey(root), kill))
	h.eventWithRetries("Ev0FAILOVER"+strconv.Itoa(i), map[string]any{"type": "message", "channel": root.Channel,
		"user": requester, "text": theQuestion, "ts": "1800000000." + fmt.Sprintf("%06d", i+1), "thread_ts": root.TS},
		func() { done() })
	done()
	since := time.Now()

	h.recovered(root, "About 2.1 million people.", since)
	h.settled(root, "About 2.1 million people.")
	if n := h.asked(theQuestion); n != 1 {
		t.Errorf("the model was asked %q %d times, want once", theQuestion, n)
	}
}

// asked counts the model's requests that end with the person's text.
func (h *harness) asked(text string) int {
	n := 0
	for _, r := range h.model.Requests() {
		if last := r.Messages[len(r.Messages)-1]; last.Role == "user" && last.Text() == text {
			n++
		}
	}
	return n
}

// (c) An Approve click arrives while the thread's master fails over.
// The click either takes, or the person is told to try again and does,
// once the cluster has its new master: the call runs once.
func failoverDuringAClaimTest(t *testing.T) {
	for _, kind := range failoverKinds {
		t.Run(kind.name, func(t *testing.T) { failoverDuringAClaim(t, kind.kill, nil) })
	}
}

func failoverDuringAClaim(t *testing.T, kill bool, observe observer) {
	h, cluster := newClusterHarness(t)
	other := h.replica()
	root, card := h.deployFlow("Deployed.")
	h.observeWith(observe, root)
	h.waitStatusOnCluster(root, "paused")

	done := cluster.StartFailover(t, threadKey(root), kill)
	resp := h.clickOn(other, card, "approve", approver)
	resp.Body.Close()
	done()
	since := time.Now()

	h.approveOnceItTakes(other, card, true)
	h.recovered(root, "Deployed.", since)
	h.settled(root, "Deployed.")
}

// approveOnceItTakes makes sure the card is approved, as a person
// would: they click Approve (on the replica at addr) unless they already
// have, and again each time the card does not show the decision and they
// were told to try again.
func (h *harness) approveOnceItTakes(addr string, card slacktest.Call, clicked bool) {
	h.t.Helper()
	told := 0
	if !clicked {
		resp := h.clickOn(addr, card, "approve", approver)
		resp.Body.Close()
	}
	for attempt := 0; ; attempt++ {
		var again bool
		h.within(2*leasePeriod, func() bool {
			again = len(h.tryAgains()) > told
			return again || strings.Contains(h.card(card), "by <@"+approver+">")
		}, "the card to show the approval")
		if !again {
			return
		}
		if attempt == 3 {
			h.t.Fatalf("the approver was told to try again %d times", attempt+1)
		}
		told = len(h.tryAgains())
		h.t.Logf("the approver was told to try again; they click again")
		resp := h.clickOn(addr, card, "approve", approver)
		resp.Body.Close()
	}
}

// tryAgains returns the "try again" messages the approver got.
func (h *harness) tryAgains() []slacktest.Call {
	var out []slacktest.Call
	for _, c := range h.slack.CallsTo("chat.postEphemeral") {
		if c.User == approver && strings.Contains(strings.ToLower(c.Text), "try again") {
			out = append(out, c)
		}
	}
	return out
}

// settled checks, once the thread shows answer, what the people in it
// see: the answer once, each approved call run once, no storage error
// left in the thread, and the conversation done.
func (h *harness) settled(root slacktest.Call, answer string) {
	h.t.Helper()
	h.waitStatusOnCluster(root, "done")
	if n := len(h.roots()); n != 1 {
		h.t.Errorf("%d root messages, want one", n)
	}
	if n := h.answers(root, answer); n != 1 {
		h.t.Errorf("%q was posted %d times, want once", answer, n)
	}
	if n := h.target.Count("POST /deploy"); n > 1 {
		h.t.Errorf("deploy ran %d times, want at most once", n)
	}
	if strings.Contains(answer, "Deployed") && h.target.Count("POST /deploy") != 1 {
		h.t.Errorf("deploy ran %d times, want once", h.target.Count("POST /deploy"))
	}
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if strings.Contains(h.card(c), `"action_id":"approve"`) {
			h.t.Errorf("a card still offers Approve after its call was decided: %s", h.card(c))
		}
	}
	h.noStorageErrors(root)
}

// waitStatusOnCluster is waitStatus reading only the standard output of
// `bot checkpoints list --json`: on a cluster with replicas the command
// says on its standard error, as the bot does, that writes wait for them.
func (h *harness) waitStatusOnCluster(root slacktest.Call, status string) {
	h.t.Helper()
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
	h.eventually(func() bool {
		cmd := exec.Command(botBinary, "checkpoints", "list", "--thread", thread, "--json")
		cmd.Env = h.env
		out, err := cmd.Output()
		var hist []struct {
			Status string `json:"status"`
		}
		if err != nil || json.Unmarshal(out, &hist) != nil || len(hist) == 0 {
			return false
		}
		return hist[0].Status == status
	}, "thread %s to be %s", thread, status)
}

// intakeKey is a Redis key in the slot of the bot's intake, where a
// request is stored before Slack is told it was received.
const intakeKey = "cs:{intake}:due"

// (d) The intake's master acknowledges "/agent" while its replica lags
// (cut off, or behind), and then dies, the replica taking over without
// the request — or the replica catches up. What the person was told must
// hold: either the conversation goes on — the request is on a replica —
// or they were told to try again, and their second try runs once.
// Acknowledged and then dropped (a root message, and nothing after it)
// is a lost request.
func failoverLosesNoAcknowledgedRequestTest(t *testing.T) {
	failoverLosesNoAcknowledgedRequest(t, true, nil)
}

// capitalQuestion and capitalAnswer are the request and the answer of
// failoverLosesNoAcknowledgedRequest.
const (
	capitalQuestion = "what is the capital of France?"
	capitalAnswer   = "It is Paris."
)

func failoverLosesNoAcknowledgedRequest(t *testing.T, kill bool, observe observer) {
	h, cluster := newClusterHarness(t)
	h.model.Then(llmtest.Reply(capitalAnswer))
	// The request's root message is the first post: hold it, so that
	// the master dies while the request is being carried on.
	rootPosted, release := h.slack.HoldNext("chat.postMessage", 0)
	defer release()

	lag := cluster.LagReplica(t, intakeKey)
	told := strings.Contains(readAll(t, h.command(capitalQuestion, nil, nil)), slackui.TextTryAgain)
	if !told {
		h.within(30*time.Second, func() bool {
			select {
			case <-rootPosted:
				return true
			default:
				return false
			}
		}, "the root message to be posted")
	}
	if kill {
		lag.TakeOver()
	} else {
		lag.CatchUp()
	}
	release()
	since := time.Now()
	if told {
		t.Logf("the person was told to try again; they do")
		h.command(capitalQuestion, nil, nil)
	}
	root := h.root(1)
	h.observeWith(observe, root)
	h.recovered(root, capitalAnswer, since)
	h.settled(root, capitalAnswer)
}

// (e) An Approve click is claimed while the thread's replica lags: the
// claim is on the master and on no replica, and the approver is told
// their decision is being recorded. What the bot then reads back must be
// what a failover keeps: when the master dies and the replica that never
// got the claim takes over, the decision is recorded there (or the
// approver is told to click again) — not taken as recorded on the word
// of the master that died, with the card left asking. (When the replica
// catches up instead, the decision stands as it was: the chaos driver
// has that case, and redisstore's TestClaimReadBackWaitsForReplicas the
// read-back's part of it.)
func failoverOfAClaimNoReplicaHasTest(t *testing.T) {
	failoverOfAClaimNoReplicaHas(t, true, nil)
}

func failoverOfAClaimNoReplicaHas(t *testing.T, kill bool, observe observer) {
	h, cluster := newClusterHarness(t)
	root, card := h.deployFlow("Deployed.")
	h.observeWith(observe, root)
	h.waitStatusOnCluster(root, "paused")

	lag := cluster.LagReplica(t, threadKey(root))
	h.clickOn(h.addr, card, "approve", approver).Body.Close()
	h.ephemeral(approver, "being recorded")
	if kill {
		lag.TakeOver()
	} else {
		lag.CatchUp()
	}
	since := time.Now()
	h.approveOnceItTakes(h.addr, card, true)
	h.recovered(root, "Deployed.", since)
	h.settled(root, "Deployed.")
}

// waitReplicas is the environment entry that makes every acknowledged
// write wait for a replica, to the letter (REDIS_WAIT_REPLICAS set).
const waitReplicas = "REDIS_WAIT_REPLICAS=1"

// (f) An Approve click is claimed, and then, while the thread's replica
// lags, the run saves the call as running: the master has that save and
// no replica does. The call must not be sent on the word of the master
// alone; and whatever the failover keeps — the replica taking over
// without the save (lag/kill), or catching up with it (lag/catch up) —
// nobody is asked to settle a call that was never sent (the "outcome
// unknown" card): the call runs once, and the conversation ends.
func failoverOfARunningSaveNoReplicaHasTest(t *testing.T) {
	for _, kill := range []bool{true, false} {
		name := "lag/catch up"
		if kill {
			name = "lag/kill"
		}
		t.Run(name, func(t *testing.T) { failoverOfARunningSaveNoReplicaHas(t, kill, nil) })
	}
}

func failoverOfARunningSaveNoReplicaHas(t *testing.T, kill bool, observe observer) {
	h, cluster := newClusterHarness(t, waitReplicas)
	root, card := h.deployFlow("Deployed.")
	h.observeWith(observe, root)
	h.waitStatusOnCluster(root, "paused")

	// The card shows the decision once it is claimed, before the run
	// resumes and saves the call as running: hold that update, make the
	// replica lag, let it go.
	decided, release := h.slack.HoldNext("chat.update", 0)
	defer release()
	h.clickOn(h.addr, card, "approve", approver).Body.Close()
	h.within(30*time.Second, func() bool {
		select {
		case <-decided:
			return true
		default:
			return false
		}
	}, "the card to show the decision")
	lag := cluster.LagReplica(t, threadKey(root))
	release()
	h.within(30*time.Second, func() bool { return h.unacknowledgedSaves() > 0 },
		"the save of the running call to go unacknowledged")
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Errorf("deploy ran %d times on a save no replica had acknowledged", n)
	}
	if kill {
		// With REDIS_WAIT_REPLICAS set, the new master takes no write
		// until a replica joins it: the run, carried on there, saves
		// the call running again, unacknowledged. Then the node that
		// died comes back as its replica, as an operator brings it
		// back.
		before := h.unacknowledgedSaves()
		lag.TakeOver()
		h.within(30*time.Second, func() bool { return h.unacknowledgedSaves() > before },
			"a save on the new master to go unacknowledged")
		lag.Rejoin()
	} else {
		lag.CatchUp()
	}
	since := time.Now()
	h.recovered(root, "Deployed.", since)
	h.settled(root, "Deployed.")
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if hasAction(c, slackui.ActionRetry) || hasAction(c, slackui.ActionMarkDone) || strings.Contains(h.card(c), "may or may not have taken effect") {
			t.Errorf("people were asked to settle a call that was never sent: %s", h.card(c))
		}
	}
}

// unacknowledgedSaves counts the bot's log lines of a checkpoint's save
// that no replica acknowledged.
func (h *harness) unacknowledgedSaves() int {
	n := 0
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, "save checkpoint") && strings.Contains(line, "not acknowledged by enough replicas") {
			n++
		}
	}
	return n
}

// auditHeadKey is a Redis key in the audit chain's slot.
const auditHeadKey = "{cs:audit}:head"

// (g) The audit chain's master has an entry its replica does not (the
// replica lags) when an operator runs `bot audit head` to note the head
// elsewhere. A head noted must be one a failover keeps: either the
// command refuses to print it, or `bot audit verify --head` with it
// still passes after the replica that never had it took over.
func auditHeadNotedIsOneAFailoverKeepsTest(t *testing.T) {
	h, cluster := newClusterHarness(t, waitReplicas)
	root, card := h.deployFlow("Deployed.")
	h.waitStatusOnCluster(root, "paused")
	ctx := context.Background()
	seq := func() int64 {
		v, _ := cluster.Client.HGet(ctx, auditHeadKey, "seq").Int64()
		return v
	}
	before := seq()

	lag := cluster.LagReplica(t, auditHeadKey)
	h.clickOn(h.addr, card, "approve", approver).Body.Close()
	h.within(30*time.Second, func() bool { return seq() > before },
		"the decision's audit entry on the audit chain's master")
	// The operator's client is given the nodes that answer as seeds:
	// the lagging replica is stopped, and a client that asked it for
	// the cluster's map would wait on it.
	var seeds []string
	for _, a := range cluster.Addrs() {
		if a != lag.Addr() {
			seeds = append(seeds, a)
		}
	}
	noted, out, err := h.auditHead("REDIS_URL=redis://" + seeds[0] + "?addr=" + strings.Join(seeds[1:], "&addr="))
	if err == nil {
		t.Logf("bot audit head printed %s while no replica had it", noted)
	} else if !strings.Contains(out, "master only") {
		t.Errorf("bot audit head failed without saying why: %v\n%s", err, out)
	}
	lag.TakeOver()
	lag.Rejoin()
	if err == nil {
		if out, err := h.run("", "audit", "verify", "--head", noted); err != nil {
			t.Errorf("bot audit head printed %s, and after the failover the chain does not hold it: %v\n%s", noted, err, out)
		}
	}

	// Once the replicas have it, the head is printed, and holds.
	h.recovered(root, "Deployed.", time.Now())
	noted, out, err = h.auditHead()
	if err != nil {
		t.Fatalf("bot audit head with its replicas caught up: %v\n%s", err, out)
	}
	if out, err := h.run("", "audit", "verify", "--head", noted); err != nil {
		t.Errorf("bot audit verify --head %s: %v\n%s", noted, err, out)
	}
}

// auditHead runs `bot audit head` and returns the head it printed on its
// standard output, everything it wrote, and how it exited; env is added
// to the bot's environment.
func (h *harness) auditHead(env ...string) (head, out string, err error) {
	h.t.Helper()
	cmd := exec.Command(botBinary, "audit", "head")
	cmd.Env = append(slices.Clone(h.env), env...) // the last value wins
	var stdout, all strings.Builder
	cmd.Stdout = io.MultiWriter(&stdout, &all)
	cmd.Stderr = &all
	err = cmd.Run()
	return strings.TrimSpace(stdout.String()), all.String(), err
}

// inboxKey is the Redis key of the calls waiting for people, which the
// Home tab and `bot approvals list` show.
const inboxKey = "cs:{inbox}:calls"

// (h) A run pauses for approval while the replica of the inbox's master
// lags: the call waiting is written to that master alone. The master
// dies and the replica takes over without it (or the replica catches
// up: the chaos driver's lag/catch up). The call must still be listed
// for its approvers — the Home tab, `bot approvals list` — within two
// lease periods of the failover, and its approval runs it once.
func failoverKeepsAWaitingCallInTheInboxTest(t *testing.T) {
	failoverKeepsAWaitingCallInTheInbox(t, true, nil)
}

func failoverKeepsAWaitingCallInTheInbox(t *testing.T, kill bool, observe observer) {
	h, cluster := newClusterHarness(t, waitReplicas)
	lag := cluster.LagReplica(t, inboxKey)
	root, card := h.deployFlow("Deployed.")
	h.observeWith(observe, root)
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
	h.within(30*time.Second, func() bool {
		ok, _ := cluster.Client.HExists(context.Background(), inboxKey, thread).Result()
		return ok
	}, "the waiting call on the inbox's master")
	if kill {
		lag.TakeOver()
		lag.Rejoin()
	} else {
		lag.CatchUp()
	}
	since := time.Now()
	h.within(6*leasePeriod, func() bool { return h.approvalsListed() == 1 }, "the waiting call in bot approvals list")
	if took := time.Since(since); took > 2*leasePeriod {
		t.Errorf("the waiting call was listed again %v after the failover; want within two lease periods (%v)", took.Round(time.Millisecond), 2*leasePeriod)
	}
	h.approveOnceItTakes(h.addr, card, false)
	h.recovered(root, "Deployed.", since)
	h.settled(root, "Deployed.")
}

// approvalsListed is how many calls `bot approvals list --json` lists,
// read from its standard output only (with replicas to wait for, it says
// so on its standard error, as the bot does); -1 if it failed.
func (h *harness) approvalsListed() int {
	cmd := exec.Command(botBinary, "approvals", "list", "--json")
	cmd.Env = h.env
	out, err := cmd.Output()
	var rows []approvalRow
	if err != nil || json.Unmarshal(out, &rows) != nil {
		return -1
	}
	return len(rows)
}
