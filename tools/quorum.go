package tools

// Quorum and per-tool decisions: how many people must approve a call,
// which decisions its card offers, and whether approving asks for a
// confirmation first. The policy file says them with
//
//	approvals_required: 2          # distinct allowed approvers (default 1)
//	decisions: [approve, reject]   # of approve, edit, reject; approve included (default all three)
//	confirm: true                  # Approve asks "are you sure?" first (default false)

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// The decisions a rule may offer on a pending call, as a policy file's
// decisions: names them.
const (
	DecisionApprove = "approve"
	DecisionEdit    = "edit"
	DecisionReject  = "reject"
)

// allDecisions are the decisions a rule offers when it does not say.
var allDecisions = []string{DecisionApprove, DecisionEdit, DecisionReject}

// MaxApprovalsRequired bounds approvals_required: more people than this
// do not review one call.
const MaxApprovalsRequired = 20

// decisionRuleKeys are the rule keys of this file, known to tools: and
// mcp_servers: entries alike.
var decisionRuleKeys = []string{"approvals_required", "decisions", "confirm"}

// Required is how many distinct allowed approvers must approve a call
// under this rule: ApprovalsRequired, and at least 1.
func (r Rule) Required() int { return max(1, r.ApprovalsRequired) }

// Offers reports whether the rule offers decision (DecisionApprove,
// DecisionEdit or DecisionReject) on a pending call.
func (r Rule) Offers(decision string) bool {
	if len(r.Decisions) == 0 {
		return slices.Contains(allDecisions, decision)
	}
	return slices.Contains(r.Decisions, decision)
}

// OfferedDecisions are the decisions the rule offers on a pending call,
// in the order approve, edit, reject.
func (r Rule) OfferedDecisions() []string {
	var out []string
	for _, d := range allDecisions {
		if r.Offers(d) {
			out = append(out, d)
		}
	}
	return out
}

// parseDecisionKey reads one of decisionRuleKeys into r.
func parseDecisionKey(key string, n *yaml.Node, r *Rule) error {
	switch key {
	case "approvals_required":
		var v int
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil || v < 1 || v > MaxApprovalsRequired {
			return fmt.Errorf("want a whole number from 1 to %d, got %s", MaxApprovalsRequired, describe(n))
		}
		r.ApprovalsRequired = v
	case "decisions":
		ds, err := parseDecisions(n)
		if err != nil {
			return err
		}
		r.Decisions = ds
	case "confirm":
		return parseBool(n, &r.Confirm)
	}
	return nil
}

func parseDecisions(n *yaml.Node) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("want a list of decisions, e.g. [approve, reject], got %s", describe(n))
	}
	ds, err := stringList(n)
	if err != nil {
		return nil, err
	}
	if len(ds) == 0 {
		return nil, errors.New("the list is empty; leave decisions out to offer approve, edit and reject")
	}
	for i, d := range ds {
		if !slices.Contains(allDecisions, d) {
			return nil, fmt.Errorf("%q is not a decision: want %s", d, strings.Join(allDecisions, ", "))
		}
		if slices.Contains(ds[:i], d) {
			return nil, fmt.Errorf("%q is listed twice", d)
		}
	}
	if !slices.Contains(ds, DecisionApprove) {
		return nil, errors.New("the list must include approve: a call nobody may approve could never run (to run calls without anyone deciding, write approval: never)")
	}
	// Kept in one order, whatever the file's.
	var out []string
	for _, d := range allDecisions {
		if slices.Contains(ds, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// checkQuorum reports a rule, read from the mapping n, that asks for
// more approvals than there are people to give them: when approvers are
// user IDs only, approvals_required may not exceed their number. (User
// groups and "anyone" are counted when a call is decided.)
func checkQuorum(n *yaml.Node, where string, r Rule) error {
	if r.Required() <= 1 || len(r.Approvers) == 0 || slices.ContainsFunc(r.Approvers, IsGroupID) {
		return nil
	}
	if people := len(slices.Compact(slices.Sorted(slices.Values(r.Approvers)))); r.Required() > people {
		at := n
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "approvals_required" {
				at = n.Content[i+1]
			}
		}
		return lineErrorf(at, "%s: approvals_required: %d approvals are required but approvers lists %d %s; list more approvers, name a user group (S…), or lower approvals_required",
			where, r.Required(), people, plural(people, "person", "people"))
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
