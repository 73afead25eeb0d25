package tools_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/tools"
)

// reachPolicy tells approvers in every way a rule can.
const reachPolicy = `tools:
  http_request:
    approvers: [U0BOB, S0OPS]
    notify: C0123ABCD
    notify_dm: true
    remind_after: 1h
    remind_times: 2
    escalate_after: 4h
    escalate_to: S0ONCALL
`

func TestParseReach(t *testing.T) {
	t.Parallel()
	withRule := func(approvers []string, reach tools.Reach) tools.Rule {
		r := tools.DefaultRule()
		r.Approvers, r.Reach = approvers, reach
		return r
	}
	tests := []struct {
		name string
		yaml string
		want tools.Rule
	}{
		{"every key", reachPolicy, withRule([]string{"U0BOB", "S0OPS"}, tools.Reach{
			Notify: "C0123ABCD", NotifyDM: true, RemindAfter: time.Hour, RemindTimes: 2,
			EscalateAfter: 4 * time.Hour, EscalateTo: []string{"S0ONCALL"},
		})},
		{"a private channel, seconds, users to escalate to", `tools:
  a:
    notify: G0PRIVATE
    remind_after: 2s
    escalate_after: 5s
    escalate_to: [U0CAROL, W0DAVE]
`, withRule(nil, tools.Reach{Notify: "G0PRIVATE", RemindAfter: 2 * time.Second,
			EscalateAfter: 5 * time.Second, EscalateTo: []string{"U0CAROL", "W0DAVE"}})},
		{"notify_dm false needs no approvers", "tools:\n  a:\n    notify_dm: false\n", withRule(nil, tools.Reach{})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tools.ParsePolicy([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("ParsePolicy(%q) error = %v", tt.yaml, err)
			}
			for _, got := range p.Tools {
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("ParsePolicy(%q) rule = %+v, want %+v", tt.yaml, got, tt.want)
				}
			}
		})
	}
}

func TestParseReachErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"a channel name", "tools:\n  a:\n    notify: \"#ops\"\n",
			`line 3: tool "a": notify: want a channel ID like C0123ABCD (in Slack: the channel's details, at the bottom), got "#ops"`},
		{"a user as channel", "tools:\n  a:\n    notify: U0BOB\n", `notify: want a channel ID`},
		{"a list of channels", "tools:\n  a:\n    notify: [C1, C2]\n", `notify: want a channel ID like C0123ABCD (in Slack: the channel's details, at the bottom), got a list`},
		{"notify_dm not a bool", "tools:\n  a:\n    approvers: [U0BOB]\n    notify_dm: yes please\n", `line 4: tool "a": notify_dm: want true or false`},
		{"notify_dm for anyone", "tools:\n  a:\n    notify_dm: true\n",
			`line 3: tool "a": notify_dm: needs approvers: a list of users (U…) or user groups (S…) to message`},
		{"notify_dm with approvers anyone", "tools:\n  a:\n    approvers: anyone\n    notify_dm: true\n", `line 4: tool "a": notify_dm: needs approvers`},
		{"remind_after not a duration", "tools:\n  a:\n    remind_after: hourly\n", `line 3: tool "a": remind_after: "hourly" is not a duration`},
		{"remind_after zero", "tools:\n  a:\n    remind_after: 0s\n", `remind_after: "0s" is not a positive duration`},
		{"remind_times zero", "tools:\n  a:\n    remind_after: 1h\n    remind_times: 0\n", `line 4: tool "a": remind_times: want a whole number from 1 to 100, got "0"`},
		{"remind_times a word", "tools:\n  a:\n    remind_after: 1h\n    remind_times: often\n", `remind_times: want a whole number from 1 to 100, got "often"`},
		{"remind_times without remind_after", "tools:\n  a:\n    remind_times: 2\n",
			`line 3: tool "a": remind_times: needs remind_after: how long a call waits between reminders`},
		{"reminders after the expiry", "tools:\n  a:\n    expires_after: 1h\n    remind_after: 1h\n",
			`line 4: tool "a": remind_after: 1h is not shorter than the call's expiry (1h): no reminder would be sent`},
		{"reminders after the default expiry", "tools:\n  a:\n    remind_after: 2d\n", `remind_after: 2d is not shorter than the call's expiry (1d)`},
		{"escalate_after alone", "tools:\n  a:\n    escalate_after: 4h\n",
			`line 3: tool "a": escalate_after: needs escalate_to: the user group (S…) or users (U…) to add as approvers`},
		{"escalate_to alone", "tools:\n  a:\n    escalate_to: S0ONCALL\n",
			`line 3: tool "a": escalate_to: needs escalate_after: how long a call waits before it is escalated`},
		{"escalate_to a name", "tools:\n  a:\n    escalate_after: 1h\n    escalate_to: oncall\n", `line 4: tool "a": escalate_to: "oncall" is not a Slack user ID`},
		{"escalate_to empty", "tools:\n  a:\n    escalate_after: 1h\n    escalate_to: []\n", `escalate_to: the list is empty`},
		{"escalate_to anyone", "tools:\n  a:\n    escalate_after: 1h\n    escalate_to: anyone\n", `escalate_to: "anyone" is not a Slack user ID`},
		{"escalation after the expiry", "tools:\n  a:\n    escalate_after: 2h\n    escalate_to: S0ONCALL\n    expires_after: 90m\n",
			`line 3: tool "a": escalate_after: 2h is not shorter than the call's expiry (1h30m): the call would expire first`},
		{"a rule without approval", "tools:\n  a:\n    approval: never\n    notify: C0123ABCD\n",
			`line 4: tool "a": notify: applies only to calls that wait for approval, and this rule says approval: never`},
		{"repeated", "tools:\n  a:\n    notify: C0123ABCD\n    notify: C0123ABCE\n", `line 4: key "notify" in tool "a" is repeated`},
		{"on an MCP server", "mcp_servers:\n  s:\n    url: https://mcp.example.com/\n    escalate_after: 1h\n",
			`line 4: MCP server "s": escalate_after: needs escalate_to`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tools.ParsePolicy([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParsePolicy(%q) = %+v, %v; want an error containing %q", tt.yaml, p, err, tt.want)
			}
		})
	}
}

// An MCP server's rule reaches its tools' approvers the same way.
func TestMCPServerReach(t *testing.T) {
	t.Parallel()
	p, err := tools.ParsePolicy([]byte("mcp_servers:\n  s:\n    url: https://mcp.example.com/\n    notify: C0123ABCD\n    remind_after: 30m\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := p.RuleFor("s__echo")
	if !ok || r.Notify != "C0123ABCD" || r.RemindAfter != 30*time.Minute || r.Reminders() != tools.DefaultRemindTimes {
		t.Errorf("RuleFor(s__echo) = %+v, %v; want the server's notify channel and reminders", r, ok)
	}
}

func TestReminders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		reach tools.Reach
		want  int
	}{
		{tools.Reach{}, 0},
		{tools.Reach{RemindTimes: 5}, 0},
		{tools.Reach{RemindAfter: time.Hour}, 3},
		{tools.Reach{RemindAfter: time.Hour, RemindTimes: 1}, 1},
	}
	for _, tt := range tests {
		if got := tt.reach.Reminders(); got != tt.want {
			t.Errorf("%+v.Reminders() = %d, want %d", tt.reach, got, tt.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{2 * time.Second, "2s"},
		{48 * time.Hour, "2d"},
		{25*time.Hour + time.Second, "25h1s"},
		{1500 * time.Millisecond, "2s"},
		{500 * time.Millisecond, "500ms"},
	}
	for _, tt := range tests {
		if got := tools.FormatDuration(tt.d); got != tt.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// checkReachInvariants fails if a rule the parser accepted could tell
// nobody, or never fire, what it promises.
func checkReachInvariants(t *testing.T, data []byte, name string, r tools.Rule) {
	t.Helper()
	if (r.EscalateAfter > 0) != (len(r.EscalateTo) > 0) {
		t.Errorf("ParsePolicy(%q): tool %q escalates after %v to %v: one without the other", data, name, r.EscalateAfter, r.EscalateTo)
	}
	if r.NotifyDM && len(r.Approvers) == 0 {
		t.Errorf("ParsePolicy(%q): tool %q messages approvers but lists none", data, name)
	}
	if r.RemindAfter < 0 || r.RemindAfter >= r.ExpiresAfter && r.RemindAfter > 0 || r.EscalateAfter >= r.ExpiresAfter && r.EscalateAfter > 0 {
		t.Errorf("ParsePolicy(%q): tool %q reminds after %v, escalates after %v, expires after %v", data, name, r.RemindAfter, r.EscalateAfter, r.ExpiresAfter)
	}
	if n := r.Reminders(); n < 0 || n > 100 || (r.RemindAfter > 0) != (n > 0) {
		t.Errorf("ParsePolicy(%q): tool %q has %d reminders", data, name, n)
	}
	if r.Notify != "" && !strings.HasPrefix(r.Notify, "C") && !strings.HasPrefix(r.Notify, "G") {
		t.Errorf("ParsePolicy(%q): tool %q notifies %q, not a channel", data, name, r.Notify)
	}
	if !r.NeedsApproval() && (r.Notify != "" || r.NotifyDM || r.RemindAfter > 0 || len(r.EscalateTo) > 0) {
		t.Errorf("ParsePolicy(%q): tool %q needs no approval yet tells people", data, name)
	}
}
