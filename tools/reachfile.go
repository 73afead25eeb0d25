package tools

// The policy file's keys that say who is told that a call waits (Reach):
// notify, notify_dm, remind_after, remind_times, escalate_after and
// escalate_to. They are read for tools: and mcp_servers: entries alike.

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"gopkg.in/yaml.v3"
)

var reachKeys = []string{"notify", "notify_dm", "remind_after", "remind_times", "escalate_after", "escalate_to"}

// channelIDPattern matches a public (C…) or private (G…) channel's ID.
var channelIDPattern = regexp.MustCompile(`^[CG][A-Z0-9]{2,}$`)

// maxRemindTimes bounds remind_times: more reminders than this are noise.
const maxRemindTimes = 100

// parseReach reads one of reachKeys into r.
func parseReach(key string, n *yaml.Node, r *Reach) error {
	var err error
	switch key {
	case "notify":
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" || !channelIDPattern.MatchString(n.Value) {
			return fmt.Errorf("want a channel ID like C0123ABCD (in Slack: the channel's details, at the bottom), got %s", describe(n))
		}
		r.Notify = n.Value
	case "notify_dm":
		err = parseBool(n, &r.NotifyDM)
	case "remind_after":
		r.RemindAfter, err = parseExpiresAfter(n)
	case "remind_times":
		var v int
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil || v < 1 || v > maxRemindTimes {
			return fmt.Errorf("want a whole number from 1 to %d, got %s", maxRemindTimes, describe(n))
		}
		r.RemindTimes = v
	case "escalate_after":
		r.EscalateAfter, err = parseExpiresAfter(n)
	case "escalate_to":
		r.EscalateTo, err = parseEscalateTo(n)
	}
	return err
}

// parseEscalateTo reads one user or user-group ID, or a list of them.
func parseEscalateTo(n *yaml.Node) ([]string, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		n = &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{n}}
	}
	ids, err := stringList(n)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, errors.New("the list is empty; name the user group (S…) or users (U…) to add as approvers")
	}
	for _, id := range ids {
		if !isUserID(id) && !IsGroupID(id) {
			return nil, fmt.Errorf("%q is not a Slack user ID (U…, W…) or user-group ID (S…)", id)
		}
	}
	return ids, nil
}

// checkReach checks the reach keys of rule r against each other and the
// rest of the rule, once the mapping n (whose keys are seen) is read.
func checkReach(r Rule, seen map[string]bool, n *yaml.Node, where string) error {
	fail := func(key, format string, args ...any) error {
		return lineErrorf(keyNode(n, key), "%s: %s: %s", where, key, fmt.Sprintf(format, args...))
	}
	for _, k := range reachKeys {
		if seen[k] && !r.NeedsApproval() {
			return fail(k, "applies only to calls that wait for approval, and this rule says approval: never")
		}
	}
	expires := r.ExpiresAfter
	if expires <= 0 {
		expires = DefaultExpiresAfter
	}
	switch {
	case seen["escalate_after"] && !seen["escalate_to"]:
		return fail("escalate_after", "needs escalate_to: the user group (S…) or users (U…) to add as approvers")
	case seen["escalate_to"] && !seen["escalate_after"]:
		return fail("escalate_to", "needs escalate_after: how long a call waits before it is escalated, e.g. 4h")
	case seen["remind_times"] && !seen["remind_after"]:
		return fail("remind_times", "needs remind_after: how long a call waits between reminders, e.g. 1h")
	case r.NotifyDM && len(r.Approvers) == 0:
		return fail("notify_dm", "needs approvers: a list of users (U…) or user groups (S…) to message; with anyone there is nobody to message")
	case seen["remind_after"] && r.RemindAfter >= expires:
		return fail("remind_after", "%s is not shorter than the call's expiry (%s): no reminder would be sent", FormatDuration(r.RemindAfter), FormatDuration(expires))
	case seen["escalate_after"] && r.EscalateAfter >= expires:
		return fail("escalate_after", "%s is not shorter than the call's expiry (%s): the call would expire first", FormatDuration(r.EscalateAfter), FormatDuration(expires))
	}
	return nil
}

// keyNode returns the key node named key in mapping n, or n itself.
func keyNode(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return n
}

// FormatDuration writes a duration the way a policy file does, for
// people: whole days as "7d", else hours, minutes and seconds without
// zero parts ("1h30m", "2s", not "1h30m0s"); under a second as Go writes
// it.
func FormatDuration(d time.Duration) string {
	if d < time.Second {
		return d.String()
	}
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	d = d.Round(time.Second)
	out := ""
	if h := d / time.Hour; h > 0 {
		out += fmt.Sprintf("%dh", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		out += fmt.Sprintf("%dm", m)
		d -= m * time.Minute
	}
	if s := d / time.Second; s > 0 {
		out += fmt.Sprintf("%ds", s)
	}
	return out
}
