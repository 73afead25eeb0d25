package slackui_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackui"
)

// A refusal is shown in mrkdwn: its people and channel as live mentions,
// its words escaped, so that a tool name cannot become a broadcast.
func TestRefusalText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    *runner.RefusedError
		want string
	}{
		{"words only", &runner.RefusedError{Why: "the policy offers only approve for <!here>, not edit"},
			"the policy offers only approve for &lt;!here&gt;, not edit"},
		{"people", &runner.RefusedError{Why: "only user U0BOB, group S0OPS may approve this call", Parts: []runner.Part{
			{Text: "only "}, {People: []string{"U0BOB", "S0OPS"}}, {Text: " may approve this call"}}},
			"only <@U0BOB> and <!subteam^S0OPS> may approve this call"},
		{"a channel", &runner.RefusedError{Why: "only members of channel C1 may decide this call", Parts: []runner.Part{
			{Text: "only members of "}, {Channel: "C1"}, {Text: " may decide this call"}}},
			"only members of <#C1> may decide this call"},
		{"markup in an ID is text", &runner.RefusedError{Why: "x", Parts: []runner.Part{
			{Text: "only "}, {People: []string{"U1><!channel"}}, {Text: " & "}, {Channel: "C1|x"}}},
			"only U1&gt;&lt;!channel &amp; C1|x"},
	}
	for _, tt := range tests {
		if got := slackui.RefusalText(tt.r); got != tt.want {
			t.Errorf("%s: slackui.RefusalText() = %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := slackui.CancelledText([]string{"U0BOB"}); got != "✖️ Cancelled by <@U0BOB>: the bot was updated while this request waited." {
		t.Errorf("CancelledText() = %q", got)
	}
}

// Each way the runner refuses a click has its own answer; an error it
// does not name is "try again" (or nothing, for a changed run's card) and
// is reported as unknown, to be logged.
func TestClickAnswers(t *testing.T) {
	t.Parallel()
	refused := &runner.RefusedError{Why: "only user U1 may approve this call", Parts: []runner.Part{{Text: "only "}, {People: []string{"U1"}}, {Text: " may approve this call"}}}
	lookup := &runner.RefusedError{Why: "the approvers could not be listed", TryAgain: true}
	other := errors.New("connection refused")
	tests := []struct {
		name    string
		answer  func(error) (string, bool)
		err     error
		want    string
		unknown bool
	}{
		{"decided", slackui.DecisionAnswer, nil, "", false},
		{"decision refused", slackui.DecisionAnswer, refused, "You can't decide this call: only <@U1> may approve this call.", false},
		{"decision lookup failed", slackui.DecisionAnswer, lookup, "the approvers could not be listed.", false},
		{"decision not pending", slackui.DecisionAnswer, runner.ErrNotPending, slackui.TextNotPending, false},
		{"decision store down", slackui.DecisionAnswer, other, slackui.TextTryAgain, true},
		{"retried", slackui.RetryAnswer, nil, "", false},
		{"retry refused", slackui.RetryAnswer, refused, "You can't retry this run: only <@U1> may approve this call.", false},
		{"retry not failed", slackui.RetryAnswer, runner.ErrNotFailed, "This run is no longer stopped; nothing to retry.", false},
		{"retry busy", slackui.RetryAnswer, runner.ErrBusy, slackui.TextBusy, false},
		{"retry store down", slackui.RetryAnswer, other, slackui.TextTryAgain, true},
		{"retry cannot help", slackui.RetryAnswer, fmt.Errorf("retry th: %w", &runner.FinalError{Text: "this conversation no longer fits in the model's context window: start a new thread to go on (HTTP 400: <max> & more)."}),
			"Retrying would fail the same way, so nothing was run. The run stopped: this conversation no longer fits in the model's context window: start a new thread to go on (HTTP 400: &lt;max&gt; &amp; more). " + slackui.TextFinalAdvice, false},
		{"changed refused", slackui.ChangedRunAnswer, refused, "You can't do this: only <@U1> may approve this call.", false},
		{"changed already", slackui.ChangedRunAnswer, runner.ErrNotChanged, "This request was restarted or cancelled already.", false},
		{"changed store down", slackui.ChangedRunAnswer, other, "", true},
	}
	for _, tt := range tests {
		got, unknown := tt.answer(tt.err)
		if got != tt.want || unknown != tt.unknown {
			t.Errorf("%s: got %q (unknown %v), want %q (unknown %v)", tt.name, got, unknown, tt.want, tt.unknown)
		}
	}
}
