package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
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
// round, and its thread.
func cardParts(t *testing.T, value string) (token, round, thread string) {
	t.Helper()
	parts := strings.SplitN(value, "|", 3)
	if len(parts) != 3 {
		t.Fatalf("button value %q does not name its call and thread", value)
	}
	return parts[0], parts[1], parts[2]
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
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("Deploying A.", call("ca", "POST", h.target.URL+"/deploy-a", "v2")))
	h.command("deploy A", nil, nil)
	rootA := h.root(1)
	cardA := h.cards(rootA, 1)[0]
	h.model.Then(llmtest.Reply("Deploying B.", call("cb", "POST", h.target.URL+"/deploy-b", "v2")))
	h.command("deploy B", nil, nil)
	rootB := h.root(2)
	cardB := h.cards(rootB, 1)[0]

	tokenA, roundA, threadA := cardParts(t, buttonValue(t, cardA, "approve"))
	_, roundB, threadB := cardParts(t, buttonValue(t, cardB, "approve"))
	if threadA == threadB {
		t.Fatalf("both cards name thread %s", threadA)
	}
	call, _, _ := strings.Cut(roundA, "#")
	forged := []string{
		tokenA + "|" + roundB + "|" + threadB, // A's token on B's call
		tokenA + "|" + call + "#1|" + threadA, // A's token on a later round of its call
		tokenA + "|9.9#0|" + threadA,          // A's token on another call of its thread
		tokenA + "|" + roundA + "|" + threadA[:strings.LastIndex(threadA, ":")] + ":1700000000.000001", // on a thread that is not there
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
	h := newHarness(t, "")
	root, card := h.deployFlow("Deployed.")
	_, round, thread := cardParts(t, buttonValue(t, card, "approve"))
	call, n, _ := strings.Cut(round, "#")

	// The earlier layout: the claim names a reference; the reference
	// holds the thread, the call, its round and the arguments' hash.
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	escaped := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(thread)
	claims := "cs:{" + escaped + "}:claims"
	stored, err := rdb.HGet(ctx, claims, "cardref:"+round).Result()
	if err != nil {
		t.Fatalf("the card's claim: %v", err)
	}
	hash := cardHash(t, stored)
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

// cardHash is the hash of the arguments a card's claim holds, in hex.
func cardHash(t *testing.T, claim string) string {
	t.Helper()
	_, enc, ok := strings.Cut(claim, "|")
	if !ok {
		t.Fatalf("card claim %q holds no hash", claim)
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		t.Fatalf("card claim %q: %v", claim, err)
	}
	return hex.EncodeToString(raw)
}
