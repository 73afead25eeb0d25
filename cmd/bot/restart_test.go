package main

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// The bot dies (SIGKILL) after posting the card; a new process serves the
// click from what Redis holds, and the run finishes once.
func TestClickAfterACrash(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	root, card := h.deployFlow("Deployed.")
	h.kill()
	h.start()
	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")
	h.waitStatus(root, "done")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	finals := 0
	for _, c := range h.slack.Messages(root.Channel, root.TS) {
		if c.Text == "Deployed." {
			finals++
		}
	}
	if finals != 1 {
		t.Errorf("the answer was posted %d times, want 1", finals)
	}
}

// Three parallel calls, decided in different orders, with the bot
// restarted between decisions: each approved call runs once and the model
// sees all three results.
func TestThreeCallsDecidedAcrossARestart(t *testing.T) {
	t.Parallel()
	orders := map[string][]int{"first to last": {0, 1, 2}, "last to first": {2, 1, 0}, "middle first": {1, 2, 0}}
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, "")
			h.model.Then(
				llmtest.Reply("Three things.",
					call("a", "POST", h.target.URL+"/a", ""),
					call("b", "POST", h.target.URL+"/b", ""),
					call("c", "POST", h.target.URL+"/c", "")),
				llmtest.Reply("All done."),
			)
			h.command("do three things", nil, nil)
			root := h.root(1)
			cards := h.cards(root, 3)
			// /b is rejected; /a and /c approved.
			decide := func(i int) {
				card := cards[i]
				if i == 1 {
					h.click(card, "reject", approver)
					view := decodeView(t, lastView(t, h))
					h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
						Values: map[string]map[string]string{"reason": {"reason_input": "not b"}}})
				} else {
					h.click(card, "approve", approver)
				}
				h.eventually(func() bool { return strings.Contains(h.card(card), "by <@"+approver+">") }, "card %d decided", i)
			}
			decide(order[0])
			// Kill in the state the test means: the decided call settled
			// (an approved one has run: its card says Done) and the run
			// paused again for the other two. Killed while the call is
			// still running, the bot would rightly withhold it behind an
			// outcome-unknown card.
			if order[0] != 1 {
				h.eventually(func() bool { return strings.Contains(h.card(cards[order[0]]), "✔️ Done") }, "call %d done", order[0])
			}
			h.waitStatus(root, "paused")
			h.kill()
			h.start()
			decide(order[1])
			decide(order[2])
			h.reply(root, "All done.")
			if a, b, c := h.target.Count("POST /a"), h.target.Count("POST /b"), h.target.Count("POST /c"); a != 1 || b != 0 || c != 1 {
				t.Errorf("executions a/b/c = %d/%d/%d, want 1/0/1", a, b, c)
			}
			last := h.model.Requests()[len(h.model.Requests())-1]
			results := map[string]string{}
			for _, m := range last.Messages {
				if m.Role == "tool" {
					results[m.ToolCallID] = m.Text()
				}
			}
			if !strings.HasPrefix(results["a"], "HTTP 200") || results["b"] != "Rejected by user "+approver+": not b" || !strings.HasPrefix(results["c"], "HTTP 200") {
				t.Errorf("the model saw results %q; want all three", results)
			}
		})
	}
}

// waitStatus waits until the newest checkpoint of root's thread has
// status, as `bot checkpoints list` reports it.
func (h *harness) waitStatus(root slacktest.Call, status string) {
	h.t.Helper()
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)
	h.eventually(func() bool {
		out, err := h.run("", "checkpoints", "list", "--thread", thread, "--json")
		var hist []struct {
			Status string `json:"status"`
		}
		if err != nil || json.Unmarshal([]byte(out), &hist) != nil || len(hist) == 0 {
			return false
		}
		return hist[0].Status == status
	}, "thread %s to be %s", thread, status)
}

func lastView(t *testing.T, h *harness) slacktest.Call {
	t.Helper()
	n := len(h.slack.CallsTo("views.open"))
	views := h.slack.WaitFor(t, "views.open", max(n, 1), 10*time.Second)
	return views[len(views)-1]
}

// A reply in the thread after the answer is a new turn: the model gets the
// earlier conversation and the answer lands in the same thread.
func TestThreadReplyContinuesTheConversation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("The capital of France is Paris."), llmtest.Reply("About 2.1 million people."))
	h.command("what is the capital of France?", nil, nil)
	root := h.root(1)
	h.reply(root, "Paris")
	h.event("", map[string]any{"type": "message", "channel": root.Channel, "user": requester,
		"text": "how many people live there?", "ts": "1800000000.000001", "thread_ts": root.TS})
	h.reply(root, "About 2.1 million people.")
	last := h.model.Requests()[1]
	var roles []string
	for _, m := range last.Messages {
		roles = append(roles, m.Role+": "+m.Text())
	}
	want := []string{"user: what is the capital of France?", "assistant: The capital of France is Paris.", "user: how many people live there?"}
	if len(roles) != 4 || strings.Join(roles[1:], "|") != strings.Join(want, "|") {
		t.Errorf("the model's second request = %q; want the system prompt then %q", roles, want)
	}
	// The bot's own messages are not turns.
	h.event("", map[string]any{"type": "message", "channel": root.Channel, "bot_id": slacktest.BotID, "user": slacktest.BotUserID,
		"text": "About 2.1 million people.", "ts": "1800000000.000002", "thread_ts": root.TS})
	h.event("", map[string]any{"type": "message", "subtype": "message_changed", "channel": root.Channel,
		"ts": "1800000000.000003", "thread_ts": root.TS})
	h.quiet()
	if n := len(h.model.Requests()); n != 2 {
		t.Errorf("the model was called %d times, want 2: the bot's own messages and edits are not turns", n)
	}
}

// A pending approval nobody decides expires on its own: the card says so
// and the model is told the call timed out.
func TestUndecidedCallExpires(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "tools:\n  http_request:\n    expires_after: 1s\n")
	root, card := h.deployFlow("Nobody approved; I did not deploy.")
	h.reply(root, "Nobody approved")
	if got := h.card(card); !strings.Contains(got, "Expired") || strings.Contains(got, `"action_id"`) {
		t.Errorf("card after expiry = %s; want Expired, no buttons", got)
	}
	last := h.model.Requests()[1]
	if tool := last.Messages[len(last.Messages)-1]; !strings.Contains(tool.Text(), "expired") {
		t.Errorf("the model was told %q; want that the call expired", tool.Text())
	}
	h.click(card, "approve", approver)
	h.ephemeral(approver, "")
	if n := h.target.Count("POST /deploy"); n != 0 {
		t.Errorf("an expired call ran %d times", n)
	}
}

// The bot acknowledges /agent and dies before the conversation has its
// first checkpoint (here: Slack refused the root message for a moment).
// Slack does not send an acknowledged command again, yet the conversation
// arrives, once, carried on by the next process.
func TestKilledAfterTheAck(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")), llmtest.Reply("Deployed."))
	h.slack.RateLimitNext("chat.postMessage", 1, time.Minute)
	if resp := h.command("deploy", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the command was answered %d", resp.StatusCode)
	}
	// The bot tried to post the root message and was refused: the
	// request is acknowledged and nothing of it is in the channel.
	h.eventually(func() bool { return len(h.slack.CallsTo("chat.postMessage")) == 1 }, "the refused root message")
	h.kill()
	h.start()
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")
	roots := len(h.roots())
	if roots != 1 || h.target.Count("POST /deploy") != 1 {
		t.Errorf("%d root messages and %d deploys, want one of each", roots, h.target.Count("POST /deploy"))
	}
}

// replica starts another bot process on the same Redis, Slack and model,
// and returns its address.
func (h *harness) replica() string {
	h.t.Helper()
	addr := freeAddr(h.t)
	cmd := exec.Command(botBinary)
	cmd.Env = append(slices.Clone(h.env), "BOT_ADDR="+addr) // the last value wins
	cmd.Stdout, cmd.Stderr = h.logs, h.logs
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	h.eventually(func() bool {
		resp, err := botClient.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, "the second replica to come up")
	return addr
}

// The replica running an approved call stalls (SIGSTOP) after saving the
// call as running and before sending it — here, while Slack is slow to
// update the card — for longer than its lease. Another replica takes the
// thread over: the call's outcome is unknown, a person retries it, it
// runs. Then the stalled replica goes on: it must notice it lost the
// thread and not send the call. The call runs once.
func TestStalledPastTheLease(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	other := h.replica()
	h.model.Then(llmtest.Reply("Deploying.", call("c1", "POST", h.target.URL+"/deploy", "v2")), llmtest.Reply("Deployed."))
	h.command("deploy", nil, nil)
	root := h.root(1)
	card := h.cards(root, 1)[0]
	h.quiet() // the command is recorded as started (see TestOutsiderCannotRejectByReplying)
	// The card's first update shows the decision with "running": it
	// comes after the save that claims the click and marks the call
	// running, and before the call is sent.
	arrived, release := h.slack.HoldNext("chat.update", 0)
	defer release()
	h.click(card, "approve", approver)
	<-arrived
	if err := h.bot.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The other replica picks the thread up once the lease lapses.
	retry := h.cardWith(root, "retry", 60*time.Second)
	body := slacktest.BlockActions(slacktest.Click{User: approver, Channel: retry.Channel, MessageTS: retry.TS, ThreadTS: retry.ThreadTS,
		ActionID: "retry", Value: buttonValue(t, retry, "retry")})
	req := h.signer.Request(http.MethodPost, "http://"+other+"/slack/interactions", "application/x-www-form-urlencoded", body, time.Now())
	if resp, err := botClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	h.reply(root, "Deployed.")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Fatalf("deploy ran %d times after the retry, want 1", n)
	}
	// The stalled replica goes on.
	if err := h.bot.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	release()
	h.eventually(func() bool { return strings.Contains(h.logs.String(), "lost the thread's lease") }, "the stalled replica to give the call up")
	if n := h.target.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
}
