package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// cardParts splits a card's button value into its token, its call and
// round, the hash of its arguments and its thread.
func cardParts(t *testing.T, value string) (token, round, hash, thread string) {
	t.Helper()
	parts := strings.SplitN(value, "|", 4)
	if len(parts) != 4 {
		t.Fatalf("button value %q does not name its call and thread", value)
	}
	return parts[0], parts[1], parts[2], parts[3]
}

// pressWith presses actionID on card with the given button value, as
// someone crafting the click would.
func (h *harness) pressWith(card slacktest.Call, actionID, user, value string) {
	h.t.Helper()
	body := slacktest.BlockActions(slacktest.Click{User: user, Channel: card.Channel, MessageTS: card.TS, ThreadTS: card.ThreadTS,
		ActionID: actionID, Value: value})
	resp := h.send("/slack/interactions", "application/x-www-form-urlencoded", body, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("click answered %d", resp.StatusCode)
	}
}

// TestForgedCardValueDecidesNothing: a card's button value names its
// thread and call beside its token, and all of it is untrusted. Values
// crafted from one card's token with another thread's call, another call
// or another round — clicked, or submitted in an edit form — decide
// nothing: each is answered "no longer pending", no call runs, and both
// cards still work with their own values afterwards, each running its
// call once.
func TestForgedCardValueDecidesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("Deploying A.", call("ca", "POST", h.target.URL+"/deploy-a", "v2")))
	h.command("deploy A", nil, nil)
	rootA := h.root(1)
	cardA := h.cards(rootA, 1)[0]
	h.model.Then(llmtest.Reply("Deploying B.", call("cb", "POST", h.target.URL+"/deploy-b", "v2")))
	h.command("deploy B", nil, nil)
	rootB := h.root(2)
	cardB := h.cards(rootB, 1)[0]

	tokenA, roundA, hashA, threadA := cardParts(t, buttonValue(t, cardA, "approve"))
	_, roundB, hashB, threadB := cardParts(t, buttonValue(t, cardB, "approve"))
	if threadA == threadB {
		t.Fatalf("both cards name thread %s", threadA)
	}
	call, _, _ := strings.Cut(roundA, "#")
	elsewhere := threadA[:strings.LastIndex(threadA, ":")] + ":1700000000.000001"
	forged := []string{
		// A's token on B's call; on a later round of A's call; on another
		// call of A's thread; on a thread that is not there; with other
		// arguments' hash.
		tokenA + "|" + roundB + "|" + hashB + "|" + threadB,
		tokenA + "|" + call + "#1|" + hashA + "|" + threadA,
		tokenA + "|9.9#0|" + hashA + "|" + threadA,
		tokenA + "|" + roundA + "|" + hashA + "|" + elsewhere,
		tokenA + "|" + roundA + "|" + strings.Repeat("0", len(hashA)) + "|" + threadA,
	}
	for i, value := range forged {
		h.pressWith(cardA, "approve", approver, value)
		h.eventually(func() bool {
			n := 0
			for _, c := range h.slack.CallsTo("chat.postEphemeral") {
				if c.User == approver && strings.Contains(c.Text, slackui.TextNotPending) {
					n++
				}
			}
			return n > i
		}, "answer %d to a forged click: %q", i+1, slackui.TextNotPending)
	}
	resp := h.submit(slacktest.Submission{User: approver, CallbackID: slackui.CallbackEdit, PrivateMetadata: forged[0],
		Values: map[string]map[string]string{slackui.BlockArgs: {slackui.InputArgs: `{"method":"POST","url":"` + h.target.URL + `/elsewhere"}`}}})
	if body := readAll(t, resp); !strings.Contains(body, `"response_action":"errors"`) || !strings.Contains(body, slackui.TextNotPending) {
		t.Errorf("an edit form submitted with a forged value answered %q; want it refused as no longer pending", body)
	}
	if n := h.target.Total(); n != 0 {
		t.Fatalf("%d calls ran after forged clicks; want none", n)
	}

	h.model.Then(llmtest.Reply("Deployed B."))
	h.click(cardB, "approve", approver).Body.Close()
	h.reply(rootB, "Deployed B.")
	h.model.Then(llmtest.Reply("Deployed A."))
	h.click(cardA, "approve", approver).Body.Close()
	h.reply(rootA, "Deployed A.")
	if a, b, e := h.target.Count("POST /deploy-a"), h.target.Count("POST /deploy-b"), h.target.Count("POST /elsewhere"); a != 1 || b != 1 || e != 0 {
		t.Errorf("deploy A ran %d times, B %d, the forged edit %d; want 1, 1 and 0", a, b, e)
	}
}

// TestCardPostedByAnEarlierVersionIsApproved: a card posted by a bot
// that kept what its buttons stand for in a reference of its own
// (cs:ref:<reference>, named by the card's claim) still works after the
// upgrade: its click, with the reference as the button's value, runs the
// call once and the answer is posted.
func TestCardPostedByAnEarlierVersionIsApproved(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	root, card := h.deployFlow("Deployed.")
	_, round, hash, thread := cardParts(t, buttonValue(t, card, "approve"))
	call, n, _ := strings.Cut(round, "#")

	// The earlier layout: the claim names a reference; the reference
	// holds the thread, the call, its round and the arguments' hash.
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	escaped := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(thread)
	claims := "cs:{" + escaped + "}:claims"
	if err := rdb.HGet(ctx, claims, "cardref:"+round).Err(); err != nil {
		t.Fatalf("the card's claim: %v", err)
	}
	const reference = "LTTVOV6C6LBJ6CMKW42BPGIVAW"
	attempt, err := strconv.Atoi(n)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(map[string]any{"thread": thread, "call": call, "attempt": attempt, "hash": hash})
	if err := rdb.Set(ctx, "cs:ref:"+reference, raw, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, claims, "cardref:"+round, reference).Err(); err != nil {
		t.Fatal(err)
	}

	h.pressWith(card, "approve", approver, reference)
	h.reply(root, "Deployed.")
	if got := h.target.Count("POST /deploy"); got != 1 {
		t.Errorf("deploy ran %d times; want once", got)
	}
}
