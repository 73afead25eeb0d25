package slackui_test

import (
	"testing"

	"github.com/countersign/countersign/slackui"
)

// A running call as a task in a streamed message, in progress and
// finished, pinned by golden files.
func TestCallTaskGolden(t *testing.T) {
	t.Parallel()
	line := slackui.ProgressLine(3, 8, "step 3 <!here> & `more`")
	compareGolden(t, "task-in-progress", slackui.CallTask("0.0", "everything__long", slackui.TaskInProgress, line))
	compareGolden(t, "task-error", slackui.CallTask("0.0", "everything__long", slackui.TaskError, line))
}

// FuzzCallTask: whatever the tool's name and the server's progress
// message, a task's title and details stay within Slack's 256
// characters, on one line, with no live markup.
func FuzzCallTask(f *testing.F) {
	f.Add("everything__long", 3.0, 8.0, "step 3 <!here>")
	f.Add("t<@U1>ool", -1.0, 0.0, "```\n<https://x|y>\xff")
	f.Fuzz(func(t *testing.T, tool string, progress, total float64, message string) {
		task := slackui.CallTask("0.0", tool, slackui.TaskInProgress, slackui.ProgressLine(progress, total, message))
		for where, s := range map[string]string{"title": task.Title, "details": task.Details} {
			checkText(t, where, s, 256, "mrkdwn")
			for _, r := range s {
				if r == '\n' {
					t.Errorf("%s %q: more than one line", where, s)
					break
				}
			}
		}
		if task.ID != "0.0" || task.Status != slackui.TaskInProgress {
			t.Errorf("task = %+v, want the call's id and status", task)
		}
	})
}
