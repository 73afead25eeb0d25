package tools

// The policy file: reading the YAML into a Policy. The YAML tree is walked
// by hand rather than decoded into structs: every error then names its
// line in words a person can act on ("approvers: the list is empty; write
// approvers: anyone …"), an empty list can be told from a missing key (the
// file fails closed), aliases resolve, and ${VAR} expands only where
// secrets belong (see mcpconfig.go).

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// LoadPolicy reads and parses the policy file at path; ${VAR} in its
// mcp_servers: section comes from the process's environment.
func LoadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	p, err := ParsePolicyEnv(data, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

// ParsePolicy parses a policy file:
//
//	max_calls_per_turn: 10        # tool calls of one model turn (default 10)
//	tools:
//	  http_request:
//	    approval: required        # required | never
//	    approvers: [U012ABCDEF]   # user IDs (U…, W…) or user-group IDs (S…), or anyone
//	    self_approval: false
//	    expires_after: 24h        # a Go duration, or whole days: 7d
//	    allow_hosts: [api.example.com, "127.0.0.1"]   # or any (the same as leaving it out)
//	    notify: C0123ABCD         # a channel that gets a copy of each card
//	    notify_dm: true           # each approver gets the card by direct message
//	    remind_after: 1h          # mention the approvers again after each hour…
//	    remind_times: 3           # …at most this many times (default 3)
//	    escalate_after: 4h        # then let these decide too, and tell them:
//	    escalate_to: S0123ONCALL  # a user group or user ID, or a list of them
//	    approvals_required: 2     # distinct allowed approvers (default 1)
//	    decisions: [approve, reject]   # of approve, edit, reject (default all three)
//	    confirm: true             # Approve asks for a confirmation (default false)
//
// Parsing is strict: an unknown key, a value of the wrong kind or an
// invalid setting is an error that names the line. It fails closed: an
// empty list (approvers: [], an allow_hosts: with nothing after it) is an
// error, not "anyone" or "any host"; those are said with the words anyone
// and any. Settings left out take their value from DefaultRule; see the
// package documentation. MCP servers are listed beside tools: under
// mcp_servers: (see MCPServer); ${VAR} in that section comes from the
// process's environment. max_calls_per_turn caps the calls of one model
// turn (default 10).
func ParsePolicy(data []byte) (*Policy, error) {
	return ParsePolicyEnv(data, os.Getenv)
}

// ParsePolicyEnv is ParsePolicy with ${VAR} taken from getenv.
func ParsePolicyEnv(data []byte, getenv func(string) string) (*Policy, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, errors.New("policy is empty: want a tools: section")
	}
	root := resolve(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		return nil, lineErrorf(root, "want a mapping with a tools: key")
	}
	p := &Policy{Tools: map[string]Rule{}}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], resolve(root.Content[i+1])
		if err := checkKey(key, seen, "", []string{"tools", "mcp_servers", "max_calls_per_turn"}); err != nil {
			return nil, err
		}
		var err error
		switch key.Value {
		case "tools":
			err = parseTools(val, p.Tools)
		case "mcp_servers":
			p.MCPServers = map[string]MCPServer{}
			err = parseMCPServers(val, getenv, p.MCPServers)
		case "max_calls_per_turn":
			p.MaxCallsPerTurn, err = parseCallCap(val)
		}
		if err != nil {
			return nil, err
		}
	}
	if !seen["tools"] && !seen["mcp_servers"] {
		return nil, lineErrorf(root, "missing tools: section")
	}
	return p, nil
}

func parseTools(n *yaml.Node, out map[string]Rule) error {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return lineErrorf(n, "tools: want a mapping of tool names to rules")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], resolve(n.Content[i+1])
		name := key.Value
		if key.Kind != yaml.ScalarNode || name == "" {
			return lineErrorf(key, "tools: want a tool name")
		}
		if _, dup := out[name]; dup {
			return lineErrorf(key, "tool %q is listed twice", name)
		}
		r, err := parseRule(name, val)
		if err != nil {
			return err
		}
		out[name] = r
	}
	return nil
}

var ruleKeys = append([]string{"approval", "approvers", "self_approval", "expires_after", "allow_hosts"}, reachKeys...)

func parseRule(tool string, n *yaml.Node) (Rule, error) {
	r := DefaultRule()
	if isNull(n) {
		return r, nil
	}
	if n.Kind != yaml.MappingNode {
		return r, lineErrorf(n, "tool %q: want a mapping of settings", tool)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], resolve(n.Content[i+1])
		if err := checkKey(key, seen, fmt.Sprintf(" in tool %q", tool), slices.Concat(ruleKeys, decisionRuleKeys)); err != nil {
			return r, err
		}
		var err error
		switch key.Value {
		case "approval":
			err = parseApproval(val, &r.Approval)
		case "approvers":
			r.Approvers, err = parseApprovers(val)
		case "self_approval":
			err = parseBool(val, &r.SelfApproval)
		case "expires_after":
			r.ExpiresAfter, err = parseExpiresAfter(val)
		case "allow_hosts":
			if tool != HTTPRequestName {
				return r, lineErrorf(key, "allow_hosts applies only to %s, not to %q", HTTPRequestName, tool)
			}
			r.AllowHosts, err = parseAllowHosts(val)
		case "approvals_required", "decisions", "confirm":
			err = parseDecisionKey(key.Value, val, &r)
		default:
			err = parseReach(key.Value, val, &r.Reach)
		}
		if err != nil {
			return r, lineErrorf(val, "tool %q: %s: %v", tool, key.Value, err)
		}
	}
	if err := checkQuorum(n, fmt.Sprintf("tool %q", tool), r); err != nil {
		return r, err
	}
	return r, checkReach(r, seen, n, fmt.Sprintf("tool %q", tool))
}

func parseApproval(n *yaml.Node, a *Approval) error {
	if n.Kind != yaml.ScalarNode || a.UnmarshalText([]byte(n.Value)) != nil {
		return fmt.Errorf(`want "required" or "never", got %s`, describe(n))
	}
	return nil
}

func parseBool(n *yaml.Node, b *bool) error {
	if n.Kind != yaml.ScalarNode || n.Decode(b) != nil {
		return errors.New("want true or false")
	}
	return nil
}

// maxCallCap bounds max_calls_per_turn: a turn with more calls than
// this is not one a person can review.
const maxCallCap = 100

func parseCallCap(n *yaml.Node) (int, error) {
	var v int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil || v < 1 || v > maxCallCap {
		return 0, lineErrorf(n, "max_calls_per_turn: want a whole number from 1 to %d, got %s", maxCallCap, describe(n))
	}
	return v, nil
}

// Anyone is the approvers: value that lets anyone in the channel decide.
const Anyone = "anyone"

// AnyHost is the allow_hosts: value that lets http_request call any host.
const AnyHost = "any"

func parseApprovers(n *yaml.Node) ([]string, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && n.Value == Anyone {
		return nil, nil
	}
	ids, err := stringList(n)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, errors.New("the list is empty; write approvers: anyone to let anyone in the channel decide, or list user or group IDs")
	}
	for _, id := range ids {
		if !isUserID(id) && !IsGroupID(id) {
			return nil, fmt.Errorf("%q is not a Slack user ID (U…, W…) or user-group ID (S…)", id)
		}
	}
	return ids, nil
}

func parseExpiresAfter(n *yaml.Node) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, errors.New("want a duration like 24h, 90m or 7d")
	}
	return parseDuration(n.Value)
}

// maxDays keeps a day count from overflowing time.Duration.
const maxDays = 100_000

// ParseDuration reads a duration as the policy file writes them (see
// parseDuration), for settings outside the file that take the same form.
func ParseDuration(s string) (time.Duration, error) { return parseDuration(s) }

// parseDuration accepts what time.ParseDuration accepts, and whole days
// ("7d"). The duration must be positive.
func parseDuration(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n > maxDays {
			return 0, fmt.Errorf("%q is not a duration like 24h, 90m or 7d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%q is not a duration like 24h, 90m or 7d", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration", s)
	}
	return d, nil
}

func parseAllowHosts(n *yaml.Node) ([]string, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && n.Value == AnyHost {
		return nil, nil
	}
	hosts, err := stringList(n)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, errors.New("the list is empty; to allow any host leave allow_hosts out or write allow_hosts: any, or list the hosts")
	}
	for _, h := range hosts {
		if _, err := parseHostPattern(h); err != nil {
			return nil, err
		}
	}
	return hosts, nil
}

// stringList reads a YAML sequence of scalars.
func stringList(n *yaml.Node) ([]string, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, errors.New("want a list, e.g. [a, b]")
	}
	out := make([]string, 0, len(n.Content))
	for _, item := range n.Content {
		item = resolve(item)
		if item.Kind != yaml.ScalarNode || item.Value == "" {
			return nil, errors.New("want a list of non-empty strings")
		}
		out = append(out, item.Value)
	}
	return out, nil
}

// checkKey reports an unknown or repeated key of a mapping.
func checkKey(key *yaml.Node, seen map[string]bool, where string, known []string) error {
	if key.Kind != yaml.ScalarNode || !slices.Contains(known, key.Value) {
		return lineErrorf(key, "unknown key %q%s (known: %s)", key.Value, where, strings.Join(known, ", "))
	}
	if seen[key.Value] {
		return lineErrorf(key, "key %q%s is repeated", key.Value, where)
	}
	seen[key.Value] = true
	return nil
}

func lineErrorf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", n.Line, fmt.Sprintf(format, args...))
}

// resolve follows a YAML alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// describe shows a value in an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "a value"
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}
