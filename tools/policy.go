package tools

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Approval says whether a call to a tool waits for a person's decision.
// The zero value is ApprovalRequired, so a rule that says nothing is the
// safe one.
type Approval int

// The approval settings of a rule.
const (
	// ApprovalRequired pauses the run until an allowed person approves,
	// edits or rejects the call.
	ApprovalRequired Approval = iota
	// ApprovalNever runs the call as soon as the model asks for it.
	ApprovalNever
)

// String returns the name used in the policy file: "required" or "never".
func (a Approval) String() string {
	switch a {
	case ApprovalRequired:
		return "required"
	case ApprovalNever:
		return "never"
	}
	return fmt.Sprintf("Approval(%d)", int(a))
}

// MarshalText implements encoding.TextMarshaler.
func (a Approval) MarshalText() ([]byte, error) {
	switch a {
	case ApprovalRequired, ApprovalNever:
		return []byte(a.String()), nil
	}
	return nil, fmt.Errorf("unknown approval %d", int(a))
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Approval) UnmarshalText(b []byte) error {
	switch string(b) {
	case "required":
		*a = ApprovalRequired
	case "never":
		*a = ApprovalNever
	default:
		return fmt.Errorf("approval must be %q or %q, got %q", "required", "never", b)
	}
	return nil
}

// DefaultExpiresAfter is how long an approval request waits when the
// policy does not say.
const DefaultExpiresAfter = 24 * time.Hour

// Rule is what the policy says about one tool.
type Rule struct {
	// Approval says whether a call waits for a person.
	Approval Approval
	// Approvers are the Slack user IDs (U…, W…) and user-group IDs (S…)
	// who may decide. Empty means anyone in the channel, which a policy
	// file says explicitly with "approvers: anyone".
	Approvers []string
	// SelfApproval allows the person who asked for the run to approve
	// its calls.
	SelfApproval bool
	// ExpiresAfter is how long a pending call waits for a decision.
	ExpiresAfter time.Duration
	// AllowHosts are the hosts http_request may call; empty means any,
	// which a policy file says by leaving the key out or with
	// "allow_hosts: any". See HTTPOptions for how entries match.
	AllowHosts []string

	// ApprovalsRequired is how many distinct allowed approvers must
	// approve a call before it runs (0 means 1; see Required).
	// Decisions are the decisions offered on a pending call, among
	// DecisionApprove, DecisionEdit and DecisionReject; empty means all
	// three (see Offers). Confirm makes the person approving confirm
	// first. See quorum.go.
	ApprovalsRequired int
	Decisions         []string
	Confirm           bool
	// Telling approvers: a copy of the card elsewhere, reminders,
	// escalation (see Reach).
	Reach
}

// Reach says who is told that a call waits, beyond its thread, and when
// they are told again. Its zero value tells nobody else.
type Reach struct {
	// Notify is a channel ID (C…, G…) where a copy of each card is
	// posted and kept in step with the card; either can be clicked.
	Notify string
	// NotifyDM sends the card by direct message to each approver (the
	// members of a listed user group); it needs an Approvers list.
	NotifyDM bool
	// RemindAfter, if set, mentions the approvers in the thread each
	// time a call has waited this long again, at most Reminders() times.
	RemindAfter time.Duration
	// RemindTimes caps the reminders of one call; zero means
	// DefaultRemindTimes.
	RemindTimes int
	// EscalateAfter and EscalateTo go together: once a call has waited
	// EscalateAfter, the user and user-group IDs of EscalateTo may decide
	// it too, and are told so in the thread.
	EscalateAfter time.Duration
	EscalateTo    []string
}

// DefaultRemindTimes caps the reminders of one call when the policy sets
// remind_after without remind_times.
const DefaultRemindTimes = 3

// Reminders is how many reminders one call may get.
func (r Reach) Reminders() int {
	switch {
	case r.RemindAfter <= 0:
		return 0
	case r.RemindTimes <= 0:
		return DefaultRemindTimes
	}
	return r.RemindTimes
}

// DefaultRule is the rule of a tool that a policy file lists without
// settings, and of every tool when there is no policy file: approval by
// anyone in the channel, the requester included, within 24 hours, and any
// host for http_request.
func DefaultRule() Rule {
	return Rule{
		Approval:     ApprovalRequired,
		SelfApproval: true,
		ExpiresAfter: DefaultExpiresAfter,
	}
}

// NeedsApproval reports whether a call under this rule waits for a person.
func (r Rule) NeedsApproval() bool { return r.Approval != ApprovalNever }

// Denial says why someone may not approve a call under a rule.
type Denial struct {
	// Why says it in words for logs and the audit trail, people named by
	// ID (see NameIDs).
	Why string
	// Approvers, when set, are who may approve instead (user and
	// user-group IDs): the denial is "only Approvers may approve this
	// call", for a front end to say with the people rendered its way.
	Approvers []string
}

// MayApprove reports whether approver may decide a call that requester
// asked for. When the answer is no, the Denial says why. inGroup reports
// whether a user belongs to a Slack user group; it is called only for
// group approvers (see IsGroupID), and only when no user ID in Approvers
// matched. An error from inGroup is returned only if no other entry lets
// the approver decide.
func (r Rule) MayApprove(approver, requester string, inGroup func(groupID, user string) (bool, error)) (bool, Denial, error) {
	if approver == "" {
		return false, Denial{Why: "the approver is unknown"}, nil
	}
	if !r.SelfApproval && approver == requester {
		return false, Denial{Why: "you asked for this call and may not approve it yourself"}, nil
	}
	if len(r.Approvers) == 0 {
		return true, Denial{}, nil
	}
	if slices.Contains(r.Approvers, approver) {
		return true, Denial{}, nil
	}
	var groupErr error
	for _, id := range r.Approvers {
		if !IsGroupID(id) {
			continue
		}
		if inGroup == nil {
			groupErr = errors.Join(groupErr, fmt.Errorf("check group %s: no group lookup", id))
			continue
		}
		ok, err := inGroup(id, approver)
		if err != nil {
			groupErr = errors.Join(groupErr, fmt.Errorf("check group %s: %w", id, err))
			continue
		}
		if ok {
			return true, Denial{}, nil
		}
	}
	if groupErr != nil {
		return false, Denial{}, groupErr
	}
	return false, Denial{Why: "only " + NameIDs(r.Approvers) + " may approve this call", Approvers: slices.Clone(r.Approvers)}, nil
}

// NameID names a user or user-group ID neutrally, for logs, the audit
// trail and the model: "user U1", "group S1". Front ends render IDs their
// own way (a Slack mention, a name in a terminal).
func NameID(id string) string {
	switch {
	case id == "":
		return "someone"
	case IsGroupID(id):
		return "group " + id
	}
	return "user " + id
}

// NameIDs names several IDs with NameID: "user U1, group S1".
func NameIDs(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = NameID(id)
	}
	return strings.Join(out, ", ")
}

// maxIDLen bounds a Slack user or user-group ID; a longer string is
// neither.
const maxIDLen = 32

var (
	userIDPattern  = regexp.MustCompile(`^[UW][A-Z0-9]+$`)
	groupIDPattern = regexp.MustCompile(`^S[A-Z0-9]+$`)
)

func isUserID(s string) bool { return userIDPattern.MatchString(s) }

// IsGroupID reports whether id is a Slack user-group ID (S followed by
// capital letters and digits, at most 32 characters), as opposed to a
// user ID. It is the one test of the bot: policies, approvals, cards and
// copies all ask it.
func IsGroupID(id string) bool { return len(id) <= maxIDLen && groupIDPattern.MatchString(id) }

// Policy says which tools the model is offered and what each call needs.
// Build one with DefaultPolicy, ParsePolicy or LoadPolicy, or as a literal.
type Policy struct {
	// Tools are the rules of the tools the policy names.
	Tools map[string]Rule
	// Default, when not nil, is the rule of every tool not in Tools, and
	// such tools are offered. When nil, only the tools in Tools are
	// offered. A policy file leaves it nil.
	Default *Rule
	// MCPServers are the MCP servers whose tools are offered, by name.
	MCPServers map[string]MCPServer
	// MaxCallsPerTurn caps the tool calls of one model turn; the calls
	// past it get an error result and no card. Zero means
	// DefaultMaxCallsPerTurn.
	MaxCallsPerTurn int
}

// DefaultMaxCallsPerTurn is the cap on the tool calls of one model turn
// when the policy does not set max_calls_per_turn.
const DefaultMaxCallsPerTurn = 10

// CallsPerTurn is the cap on the tool calls of one model turn.
func (p *Policy) CallsPerTurn() int {
	if p == nil || p.MaxCallsPerTurn <= 0 {
		return DefaultMaxCallsPerTurn
	}
	return p.MaxCallsPerTurn
}

// DefaultPolicy is the policy when there is no policy file: every tool is
// offered under DefaultRule.
func DefaultPolicy() *Policy {
	r := DefaultRule()
	return &Policy{Default: &r}
}

// RuleFor returns the rule of the named tool, and false if the policy
// does not offer it.
func (p *Policy) RuleFor(name string) (Rule, bool) {
	if r, ok := p.Tools[name]; ok {
		return r, true
	}
	if s, ok := p.mcpServerFor(name); ok {
		return s.Rule, true
	}
	if p.Default != nil {
		return *p.Default, true
	}
	return Rule{}, false
}
