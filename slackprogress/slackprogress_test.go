package slackprogress_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/slackprogress"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const thread = slacktest.TeamID + ":" + slacktest.ChannelID + ":1700000000.000100"

// Where answers stream, a call's progress is a task in a streamed
// message of its own, ended with an error status when the call fails;
// progress after the end changes nothing.
func TestProgressAsATask(t *testing.T) {
	web := slacktest.NewServer(t)
	api := slack.New("xoxb-test", slack.OptionAPIURL(web.URL()))
	calls := slackprogress.New(api, func() bool { return true }, nil)
	calls.Started(slackprogress.Call{Thread: thread, Key: "0.0", Tool: "srv__long", Requester: "U0ALICE"})
	info := tools.CallInfo{Thread: thread, Call: "0.0"}
	ctx := context.Background()
	calls.CallProgress(ctx, info, 1, 4, "warming up")
	started := web.WaitFor(t, "chat.startStream", 1, 10*time.Second)[0]
	if started.ThreadTS != "1700000000.000100" || started.Params["recipient_user_id"] != "U0ALICE" {
		t.Errorf("chat.startStream = %+v, want it in the thread, for the requester", started.Params)
	}
	calls.CallProgress(ctx, info, 3, 4, "")
	waitFor(t, "the second progress", func() bool { return len(web.Tasks(started.Channel, started.TS)) == 2 })
	calls.Finished(ctx, thread, "0.0", true)
	calls.CallProgress(ctx, info, 4, 4, "late")
	tasks := web.Tasks(started.Channel, started.TS)
	var got []string
	for _, u := range tasks {
		got = append(got, u.Status+" "+u.Details)
	}
	want := []string{"in_progress ⏳ Progress: 1 of 4 (25%) — warming up", "in_progress ⏳ Progress: 3 of 4 (75%)", "error ⏳ Progress: 3 of 4 (75%)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("task updates = %q, want %q", got, want)
	}
	if web.Streaming(started.Channel, started.TS) {
		t.Error("the task's stream was not stopped")
	}
	if n := len(web.CallsTo("chat.update")); n != 0 {
		t.Errorf("%d card updates, want none: the task shows the progress", n)
	}
}

// A workspace that refuses the task: the progress is a line on the
// call's card, and no task is tried again.
func TestProgressOnTheCardWhenTasksAreRefused(t *testing.T) {
	web := slacktest.NewServer(t)
	api := slack.New("xoxb-test", slack.OptionAPIURL(web.URL()))
	_, card, err := api.PostMessage(slacktest.ChannelID, slack.MsgOptionTS("1700000000.000100"), slack.MsgOptionText("card", false))
	if err != nil {
		t.Fatal(err)
	}
	web.FailNext("chat.startStream", "unknown_method", 1)
	calls := slackprogress.New(api, func() bool { return true }, nil)
	blocks := []slack.Block{slackui.SectionBlock("the card")}
	for i, key := range []string{"0.0", "0.1"} {
		calls.Started(slackprogress.Call{Thread: thread, Key: key, Tool: "srv__long", CardTS: card, CardText: "card", CardBlocks: blocks})
		calls.CallProgress(context.Background(), tools.CallInfo{Thread: thread, Call: key}, 2, 0, "")
		waitFor(t, "the card to show progress", func() bool { return len(web.CallsTo("chat.update")) == i+1 })
	}
	if !strings.Contains(string(web.CallsTo("chat.update")[0].Blocks), "Progress: 2") {
		t.Errorf("card = %s, want the progress line", web.CallsTo("chat.update")[0].Blocks)
	}
	if n := len(web.CallsTo("chat.startStream")); n != 1 {
		t.Errorf("chat.startStream tried %d times, want once", n)
	}
}

// A channel that refuses the bot (removed from it, or archived) shows no
// progress, and is no reason to stop streaming tasks in other channels.
func TestProgressInAChannelThatRefusesTheBot(t *testing.T) {
	web := slacktest.NewServer(t)
	api := slack.New("xoxb-test", slack.OptionAPIURL(web.URL()))
	web.RemoveBot(slacktest.ChannelID)
	calls := slackprogress.New(api, func() bool { return true }, nil)
	ctx := context.Background()
	calls.Started(slackprogress.Call{Thread: thread, Key: "0.0", Tool: "srv__long", CardTS: "1700000000.000200", CardText: "card"})
	calls.CallProgress(ctx, tools.CallInfo{Thread: thread, Call: "0.0"}, 1, 4, "")
	if c := web.WaitFor(t, "chat.startStream", 1, 10*time.Second)[0]; c.Error != "not_in_channel" {
		t.Fatalf("chat.startStream answered %q, want not_in_channel", c.Error)
	}
	other := slacktest.TeamID + ":C0OTHER:1700000000.000300"
	calls.Started(slackprogress.Call{Thread: other, Key: "0.0", Tool: "srv__long"})
	calls.CallProgress(ctx, tools.CallInfo{Thread: other, Call: "0.0"}, 1, 4, "")
	if c := web.WaitFor(t, "chat.startStream", 2, 10*time.Second)[1]; !c.OK() || c.Channel != "C0OTHER" {
		t.Errorf("the task in another channel: chat.startStream in %s answered %q, want it streamed", c.Channel, c.Error)
	}
	if n := len(web.CallsTo("chat.update")); n != 0 {
		t.Errorf("%d card updates in a channel that refuses the bot, want none", n)
	}
}
