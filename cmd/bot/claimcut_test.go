package main

import (
	"bytes"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// cutProxy is a TCP proxy between the bot and its Redis that loses the
// answers to the next left commands whose bytes hold marker: it forwards
// each, reads Redis's answer, and drops the connection instead of passing
// the answer on — a reset link, after Redis ran the command. The client
// then sends the command again on a new connection. An error answer (such
// as NOSCRIPT) is let through, and counts for nothing.
type cutProxy struct {
	ln     net.Listener
	to     string
	marker []byte
	left   atomic.Int64
	cuts   atomic.Int64
	// downOnCut: a cut also takes the link down — every connection is
	// dropped and new ones are closed at once — until down is cleared.
	downOnCut atomic.Bool
	down      atomic.Bool
	// before: a cut drops the command itself, before Redis sees it,
	// and takes the link down.
	before atomic.Bool

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

func startCutProxy(t *testing.T, to, marker string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, to: to, marker: []byte(marker), conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		// The bot may still hold its connections: close them, so that
		// every goroutine of the proxy ends.
		ln.Close()
		p.mu.Lock()
		p.closed = true
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.serve(client)
			}()
		}
	}()
	return p
}

// track keeps c to close at the end, and reports false (c closed) if
// the proxy is closed already.
func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// take reports whether an answer is still to be cut, counting it.
func (p *cutProxy) take() bool {
	for {
		n := p.left.Load()
		if n <= 0 {
			return false
		}
		if p.left.CompareAndSwap(n, n-1) {
			p.cuts.Add(1)
			return true
		}
	}
}

// goDown drops every connection; new ones are closed until down is
// cleared.
func (p *cutProxy) goDown() {
	p.down.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *cutProxy) serve(client net.Conn) {
	defer client.Close()
	if p.down.Load() || !p.track(client) {
		return
	}
	server, err := net.Dial("tcp", p.to)
	if err != nil || !p.track(server) {
		return
	}
	var cutNext atomic.Bool
	done := make(chan struct{})
	defer func() {
		client.Close()
		server.Close()
		<-done
	}()
	go func() {
		defer close(done)
		defer server.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if p.left.Load() > 0 && bytes.Contains(buf[:n], p.marker) {
					if p.before.Load() && p.take() {
						p.goDown()
						return // the command is lost with the connection
					}
					cutNext.Store(true)
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if cutNext.Load() && buf[0] != '-' && p.take() {
				if p.downOnCut.Load() {
					p.goDown()
				}
				return // the answer is lost with the connection
			}
			cutNext.Store(false)
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestApproveWhoseClaimAnswerIsCut: through the binary, with a TCP proxy
// between the bot and Redis, the answer to the save that claims the
// approver's decision and marks the call running is lost after Redis ran
// it; the bot's Redis client sends it again. The person sees what they
// would without the fault: the card says who approved it, the call runs
// once, and its result is posted — not a call whose outcome is unknown,
// waiting for someone to settle it, nor "already approved" to the
// approver themself.
func TestApproveWhoseClaimAnswerIsCut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	p := startCutProxy(t, h.redis.Addr(), `"by":"`+approver+`"`)
	h.restartWith("REDIS_URL=redis://" + p.addr() + "/0")
	h.model.Then(
		llmtest.Reply("I'll deploy v2.", call("c1", "POST", h.target.URL+"/deploy", "v2")),
		llmtest.Reply("Deployed v2."),
	)
	if resp := h.command("deploy v2", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/agent answered %d", resp.StatusCode)
	}
	root := h.root(1)
	card := h.cards(root, 1)[0]
	p.left.Store(1)
	if resp := h.click(card, "approve", approver); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve answered %d", resp.StatusCode)
	}
	h.reply(root, "Deployed v2.")
	if n := p.cuts.Load(); n != 1 {
		t.Fatalf("%d answers were cut, want 1: the test does not test anything", n)
	}
	checkApprovedOnce(t, h, card)
	checkNothingUnknownNorTold(t, h, root)
}

// TestApproveWhoseClaimAnswerNeverComes: the answer to the save that
// claims the approver's decision is lost at every attempt the bot's Redis
// client makes (the first and its three retries: Redis runs each, the link
// drops each answer), so that the client gives up with an error although
// the decision was claimed and the call marked running. The approver is
// not told to try again — the decision is recorded — and the run goes on
// as it would without the fault: the call runs once, the card says who
// approved it, and the result is posted, not a call whose outcome is
// unknown.
func TestApproveWhoseClaimAnswerNeverComes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	p := startCutProxy(t, h.redis.Addr(), `"by":"`+approver+`"`)
	const attempts = 4 // max_retries=3: the first attempt and three more
	h.restartWith("REDIS_URL=redis://" + p.addr() + "/0?max_retries=3")
	root, card := h.deployFlow("Deployed v2.")
	p.left.Store(attempts)
	if resp := h.click(card, "approve", approver); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve answered %d", resp.StatusCode)
	}
	h.reply(root, "Deployed v2.")
	if n := p.cuts.Load(); n != attempts {
		t.Fatalf("%d answers were cut, want %d: the client did not give up, and the test does not test anything", n, attempts)
	}
	checkApprovedOnce(t, h, card)
	checkNothingUnknownNorTold(t, h, root)
}

// TestApproveWhoseClaimAnswerIsLostForGood: the link to Redis goes down
// right after Redis ran the save that claims the approver's decision and
// marks the call running, and stays down past every resend, so that the
// bot cannot know whether the decision was recorded. The approver is told
// it is being recorded — not "try again", which would have them or a
// colleague click again on a decision that stands — and, once Redis
// answers again, the bot reads the claim back: it is the approver's, the
// card says so, and the call, saved running before it was sent, is
// recovered as after a crash (its outcome unknown, for a person to
// settle), never sent twice. The approver hears nothing more.
func TestApproveWhoseClaimAnswerIsLostForGood(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	p := startCutProxy(t, h.redis.Addr(), `"by":"`+approver+`"`)
	h.restartWith("REDIS_URL=redis://" + p.addr() + "/0")
	root, card := h.deployFlow("Deployed v2.")
	h.quiet() // the card is recorded: Redis is not needed to show it
	p.downOnCut.Store(true)
	p.left.Store(1)
	// The request is answered once the bot has given the claim's
	// answer up.
	if resp := h.click(card, "approve", approver); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve answered %d", resp.StatusCode)
	}
	h.eventually(func() bool { return len(ephemeralsTo(h, approver)) > 0 }, "an answer to the approver")
	if n := p.cuts.Load(); n != 1 {
		t.Fatalf("%d answers were cut, want 1: the test does not test anything", n)
	}
	p.down.Store(false) // Redis answers again
	h.cardWith(root, "retry", time.Minute)
	checkCardApproved(t, h, card)
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Errorf("deploy ran %d times; a call whose outcome is unknown is not sent again by itself", n)
	}
	checkToldRecordingAlone(t, h)
}

// checkApprovedOnce checks what people see of an approval that went
// through: the deploy ran once, and the card says who approved it and
// has no buttons left.
func checkApprovedOnce(t *testing.T, h *harness, card slacktest.Call) {
	t.Helper()
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	checkCardApproved(t, h, card)
}

// checkCardApproved checks that the card says who approved it and has no
// buttons left.
func checkCardApproved(t *testing.T, h *harness, card slacktest.Call) {
	t.Helper()
	got := h.card(card)
	if !strings.Contains(got, "Approved by <@"+approver+">") || strings.Contains(got, `"action_id"`) {
		t.Errorf("card after approval = %s; want 'Approved by <@%s>' and no buttons", got, approver)
	}
}

// checkNothingUnknownNorTold checks that the thread shows no call whose
// outcome is unknown and that the approver was told nothing.
func checkNothingUnknownNorTold(t *testing.T, h *harness, root slacktest.Call) {
	t.Helper()
	for _, text := range h.threadTexts(root) {
		if strings.Contains(strings.ToLower(text), "unknown") {
			t.Errorf("the thread shows %q: the call was taken for one whose outcome is unknown", text)
		}
	}
	if told := ephemeralsTo(h, approver); len(told) > 0 {
		t.Errorf("the approver was told %q", told)
	}
}

// checkToldRecordingAlone checks that the approver was told their
// decision is being recorded, and nothing else.
func checkToldRecordingAlone(t *testing.T, h *harness) {
	t.Helper()
	if told := ephemeralsTo(h, approver); !slices.Equal(told, []string{slackui.TextRecording}) {
		t.Errorf("the approver was told %q, want %q alone", told, slackui.TextRecording)
	}
}

// ephemeralsTo lists the ephemeral messages sent to user, in order.
func ephemeralsTo(h *harness, user string) []string {
	var out []string
	for _, e := range h.slack.CallsTo("chat.postEphemeral") {
		if e.User == user {
			out = append(out, e.Text)
		}
	}
	return out
}

// TestApproveWhoseClaimIsLostOnTheWay: as above, but the link goes down
// as the claim is sent, before Redis sees it: nothing is recorded. The
// approver is told the decision is being recorded and, once Redis
// answers again, the bot finds no claim and records the decision then,
// as the click would have: the call runs once, the card says who
// approved it, and the approver hears nothing more.
func TestApproveWhoseClaimIsLostOnTheWay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	p := startCutProxy(t, h.redis.Addr(), `"by":"`+approver+`"`)
	h.restartWith("REDIS_URL=redis://" + p.addr() + "/0")
	root, card := h.deployFlow("Deployed v2.")
	h.quiet() // the card is recorded: Redis is not needed to show it
	p.before.Store(true)
	p.left.Store(1)
	if resp := h.click(card, "approve", approver); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve answered %d", resp.StatusCode)
	}
	h.eventually(func() bool { return len(ephemeralsTo(h, approver)) > 0 }, "an answer to the approver")
	if n := p.cuts.Load(); n != 1 {
		t.Fatalf("%d commands were cut, want 1: the test does not test anything", n)
	}
	p.down.Store(false) // Redis answers again
	h.reply(root, "Deployed v2.")
	checkApprovedOnce(t, h, card)
	checkToldRecordingAlone(t, h)
}

// TestApproveWhoseLostClaimLoses: the approver's claim is lost on the way
// to Redis as the link of their replica goes down; they are told their
// decision is being recorded. Meanwhile the requester rejects the call on
// another replica, whose link is fine. Once the first replica's Redis
// answers again, it finds the call decided by someone else: the approver
// is told in the thread who rejected it first, and the call never runs.
func TestApproveWhoseLostClaimLoses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	other := h.replica() // straight to Redis
	p := startCutProxy(t, h.redis.Addr(), `"by":"`+approver+`"`)
	h.restartWith("REDIS_URL=redis://" + p.addr() + "/0")
	_, card := h.deployFlow("Deployed v2.")
	h.quiet() // the card is recorded: Redis is not needed to show it
	p.before.Store(true)
	p.left.Store(1)
	if resp := h.click(card, "approve", approver); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve answered %d", resp.StatusCode)
	}
	h.eventually(func() bool { return len(ephemeralsTo(h, approver)) > 0 }, "an answer to the approver")
	if n := p.cuts.Load(); n != 1 {
		t.Fatalf("%d commands were cut, want 1: the test does not test anything", n)
	}
	reject := slacktest.ViewSubmission(slacktest.Submission{User: requester, CallbackID: slackui.CallbackReject,
		PrivateMetadata: buttonValue(t, card, "reject"),
		Values:          map[string]map[string]string{slackui.BlockReason: {slackui.InputReason: "not today"}}})
	req := h.signer.Request(http.MethodPost, "http://"+other+"/slack/interactions", "application/x-www-form-urlencoded", reject, time.Now())
	resp, err := botClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h.eventually(func() bool { return strings.Contains(h.card(card), "Rejected by <@"+requester+">") }, "the card to show the rejection")
	p.down.Store(false) // the first replica's Redis answers again
	h.eventually(func() bool { return len(ephemeralsTo(h, approver)) > 1 }, "a second answer to the approver")
	told := ephemeralsTo(h, approver)
	if len(told) != 2 || told[0] != slackui.TextRecording || !strings.Contains(told[1], "Already rejected") || !strings.Contains(told[1], requester) {
		t.Errorf("the approver was told %q; want %q, then who rejected the call first", told, slackui.TextRecording)
	}
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Errorf("the rejected call ran %d times", n)
	}
}

// TestApproveOnAnotherReplicaWhoseClaimAnswerIsLostForGood: the run is
// another replica's, so the approver's replica claims the decision on
// its own (the run is not cached there), and its link to Redis goes down
// right after Redis ran the claim. The approver is told the decision is
// being recorded, not "try again"; once Redis answers, the claim is read
// back as theirs, and the run goes on — here once the lease the claim
// took lapses, from its wake-up: the call runs once, the card says who
// approved it, and the approver hears nothing more.
func TestApproveOnAnotherReplicaWhoseClaimAnswerIsLostForGood(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	other := h.replica() // straight to Redis
	p := startCutProxy(t, h.redis.Addr(), `"by":"`+approver+`"`)
	h.restartWith("REDIS_URL=redis://" + p.addr() + "/0")
	h.model.Then(
		llmtest.Reply("I'll deploy v2.", call("c1", "POST", h.target.URL+"/deploy", "v2")),
		llmtest.Reply("Deployed v2."),
	)
	form := url.Values{"text": {"deploy v2"}, "user_id": {requester}}
	req := h.signer.Request(http.MethodPost, "http://"+other+"/slack/commands", "application/x-www-form-urlencoded", slacktest.SlashCommand(form), time.Now())
	resp, err := botClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.quietAt(other) // the request is recorded as started: no process starts it again
	h.quiet()        // the card is recorded: Redis is not needed to show it
	p.downOnCut.Store(true)
	p.left.Store(1)
	if resp := h.click(card, "approve", approver); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve answered %d", resp.StatusCode)
	}
	h.eventually(func() bool { return len(ephemeralsTo(h, approver)) > 0 }, "an answer to the approver")
	if n := p.cuts.Load(); n != 1 {
		t.Fatalf("%d answers were cut, want 1: the test does not test anything", n)
	}
	p.down.Store(false) // Redis answers again
	// A lease and the schedule's next look later, however busy the machine.
	h.within(6*leasePeriod, func() bool { return h.target.Count("POST /deploy") > 0 }, "the approved deploy")
	h.reply(root, "Deployed v2.")
	checkApprovedOnce(t, h, card)
	checkToldRecordingAlone(t, h)
}

// TestRejectWhoseClaimAnswerIsLostForGood: the requester submits a
// rejection, and the link to Redis goes down right after Redis ran its
// claim. The modal does not say "try again" — the rejection stands — but
// that it may be recorded and that submitting again is safe. Once Redis
// answers, the card shows the rejection, the call never runs, and the
// same rejection submitted again closes the modal.
func TestRejectWhoseClaimAnswerIsLostForGood(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	p := startCutProxy(t, h.redis.Addr(), `"by":"`+requester+`"`)
	h.restartWith("REDIS_URL=redis://" + p.addr() + "/0")
	_, card := h.deployFlow("Not deployed.")
	h.quiet() // the card is recorded: Redis is not needed to show it
	p.downOnCut.Store(true)
	p.left.Store(1)
	reject := slacktest.Submission{User: requester, CallbackID: slackui.CallbackReject, PrivateMetadata: buttonValue(t, card, "reject"),
		Values: map[string]map[string]string{slackui.BlockReason: {slackui.InputReason: "not today"}}}
	body := readAll(t, h.submit(reject))
	if n := p.cuts.Load(); n != 1 {
		t.Fatalf("%d answers were cut, want 1: the test does not test anything", n)
	}
	if strings.Contains(strings.ToLower(body), "try again") || !strings.Contains(body, "may already be recorded") {
		t.Errorf("the rejection was answered %s; want that it may already be recorded", body)
	}
	p.down.Store(false) // Redis answers again
	h.eventually(func() bool { return strings.Contains(h.card(card), "Rejected by <@"+requester+">") }, "the card to show the rejection")
	resp := h.submit(reject)
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "" {
		t.Errorf("the same rejection submitted again was answered %d %q; want an empty 200 that closes the modal", resp.StatusCode, body)
	}
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Errorf("the rejected call ran %d times", n)
	}
}
