package slackui

import (
	"github.com/slack-go/slack"
)

// BudgetTaskText bounds the title and details of a task in a streamed
// message (Slack allows 256 characters).
const BudgetTaskText = 250

// TaskStatus is where a task in a streamed message stands.
type TaskStatus = slack.TaskCardStatus

// The statuses a call's task goes through: in progress while it runs,
// then complete or error.
const (
	TaskInProgress = slack.TaskCardStatusInProgress
	TaskComplete   = slack.TaskCardStatusComplete
	TaskError      = slack.TaskCardStatusError
)

// CallTask is a running call as a task in a streamed message (a
// task_update chunk of chat.startStream, chat.appendStream and
// chat.stopStream): its id is the call's key (never shown), its title
// names the tool,
// its details say how far it got (ProgressLine), escaped like mrkdwn and
// on one line.
func CallTask(call, tool string, status TaskStatus, details string) slack.TaskUpdateChunk {
	t := slack.NewTaskUpdateChunk(call, ClipText(slackEscape(OneLine("Running "+tool)), BudgetTaskText))
	t.Status = status
	if details != "" {
		t.Details = ClipText(OneLine(details), BudgetTaskText)
	}
	return t
}
