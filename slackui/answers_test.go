package slackui_test

import (
	"testing"

	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackui"
)

// A refusal is shown in mrkdwn: its people and channel as live mentions,
// its words escaped, so that a tool name cannot become a broadcast.
func TestRefusalText(t *testing.T) {
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
