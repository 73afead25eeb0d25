package slacksim

import (
	"context"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/internal/testclock"
)

// A streamed message may carry tasks instead of text: the playground
// shows a line per task, with its latest status and details.
func TestStreamedTasksShowTheirLatestState(t *testing.T) {
	ctx := context.Background()
	sim, api, _ := newAPI(t, testclock.New(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)))
	_, root, err := api.PostMessageContext(ctx, DefaultChannelID, slack.MsgOptionText("root", false))
	if err != nil {
		t.Fatal(err)
	}
	task := func(status slack.TaskCardStatus, details string) slack.MsgOption {
		c := slack.NewTaskUpdateChunk("0.0", "Running srv__long")
		c.Status, c.Details = status, details
		return slack.MsgOptionChunks(c)
	}
	_, ts, err := api.StartStreamContext(ctx, DefaultChannelID, slack.MsgOptionTS(root), task(slack.TaskCardStatusInProgress, "1 of 3"))
	if err != nil {
		t.Fatalf("chat.startStream with a task: %v", err)
	}
	if _, _, err := api.AppendStreamContext(ctx, DefaultChannelID, ts, task(slack.TaskCardStatusInProgress, "2 of 3")); err != nil {
		t.Fatalf("chat.appendStream with a task and no text: %v", err)
	}
	if _, _, err := api.StopStreamContext(ctx, DefaultChannelID, ts, task(slack.TaskCardStatusComplete, "3 of 3")); err != nil {
		t.Fatalf("chat.stopStream: %v", err)
	}
	st := sim.State()
	got := st.Messages[len(st.Messages)-1]
	if got.TS != ts || got.Text != "✅ Running srv__long — 3 of 3" || got.Streaming {
		t.Errorf("streamed message = %+v, want one line for its finished task", got)
	}
}
