package tools_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/tools"
)

// designPolicy is the example policy file of the design document.
const designPolicy = `tools:
  http_request:
    approval: required        # required | never
    approvers: [U012ABCDEF]   # Slack user IDs or user-group IDs (S…); empty = anyone in the channel
    self_approval: false      # may the person who asked approve their own request
    expires_after: 24h
    allow_hosts: [api.example.com, "127.0.0.1"]   # http_request only: hosts it may call
`

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	defaults := tools.DefaultRule()
	tests := []struct {
		name string
		yaml string
		want map[string]tools.Rule
	}{
		{"design example", designPolicy, map[string]tools.Rule{
			"http_request": {
				Approval:     tools.ApprovalRequired,
				Approvers:    []string{"U012ABCDEF"},
				SelfApproval: false,
				ExpiresAfter: 24 * time.Hour,
				AllowHosts:   []string{"api.example.com", "127.0.0.1"},
			},
		}},
		{"omitted settings take the defaults", "tools:\n  http_request: {}\n", map[string]tools.Rule{
			"http_request": defaults,
		}},
		{"a bare tool name takes the defaults", "tools:\n  http_request:\n", map[string]tools.Rule{
			"http_request": defaults,
		}},
		{"never, days, groups", `tools:
  lookup:
    approval: never
    approvers: [S0GROUP1, W0ENTERPRISE, U1]
    expires_after: 7d
`, map[string]tools.Rule{
			"lookup": {
				Approval:     tools.ApprovalNever,
				Approvers:    []string{"S0GROUP1", "W0ENTERPRISE", "U1"},
				SelfApproval: true,
				ExpiresAfter: 7 * 24 * time.Hour,
			},
		}},
		{"go duration", "tools:\n  a:\n    expires_after: 1h30m\n", map[string]tools.Rule{
			"a": {Approval: tools.ApprovalRequired, SelfApproval: true, ExpiresAfter: 90 * time.Minute},
		}},
		{"no tools offered", "tools: {}\n", map[string]tools.Rule{}},
		{"anyone and any host, said explicitly", "tools:\n  http_request:\n    approvers: anyone\n    allow_hosts: any\n", map[string]tools.Rule{
			"http_request": defaults,
		}},
		{"quorum, decisions and confirm", `tools:
  deploy:
    approvers: [U0BOB, U0CAROL, U0DAVE]
    self_approval: false
    approvals_required: 2
    decisions: [reject, approve]
    confirm: true
`, map[string]tools.Rule{
			"deploy": {
				Approval: tools.ApprovalRequired, Approvers: []string{"U0BOB", "U0CAROL", "U0DAVE"}, ExpiresAfter: 24 * time.Hour,
				ApprovalsRequired: 2, Decisions: []string{"approve", "reject"}, Confirm: true,
			},
		}},
		{"a quorum of a user group or of anyone is not counted", `tools:
  a: {approvers: [S0OPS], approvals_required: 5}
  b: {approvers: anyone, approvals_required: 3, decisions: [approve, edit, reject], confirm: false}
`, map[string]tools.Rule{
			"a": {Approval: tools.ApprovalRequired, Approvers: []string{"S0OPS"}, SelfApproval: true, ExpiresAfter: 24 * time.Hour, ApprovalsRequired: 5},
			"b": {Approval: tools.ApprovalRequired, SelfApproval: true, ExpiresAfter: 24 * time.Hour, ApprovalsRequired: 3,
				Decisions: []string{"approve", "edit", "reject"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tools.ParsePolicy([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("ParsePolicy(%q) error = %v", tt.yaml, err)
			}
			if !reflect.DeepEqual(p.Tools, tt.want) {
				t.Errorf("ParsePolicy(%q).Tools = %+v, want %+v", tt.yaml, p.Tools, tt.want)
			}
			if p.Default != nil {
				t.Errorf("ParsePolicy(%q).Default = %+v, want nil: a file offers only the tools it lists", tt.yaml, *p.Default)
			}
		})
	}
}

func TestParsePolicyErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"unknown rule key", "tools:\n  http_request:\n    aprovers: [U1]\n",
			`line 3: unknown key "aprovers" in tool "http_request" (known: approval, approvers, self_approval, expires_after, allow_hosts, notify, notify_dm, remind_after, remind_times, escalate_after, escalate_to, approvals_required, decisions, confirm)`},
		{"unknown top-level key", "tools: {}\nextra: 1\n", `line 2: unknown key "extra" (known: tools, mcp_servers, max_calls_per_turn)`},
		{"empty approvers", "tools:\n  a:\n    approvers: []\n", `line 3: tool "a": approvers: the list is empty; write approvers: anyone`},
		{"approvers with nothing after it", "tools:\n  a:\n    approvers:\n", `line 3: tool "a": approvers: the list is empty`},
		{"empty allow_hosts", "tools:\n  http_request:\n    allow_hosts: []\n", `line 3: tool "http_request": allow_hosts: the list is empty; to allow any host leave allow_hosts out or write allow_hosts: any`},
		{"allow_hosts with nothing after it", "tools:\n  http_request:\n    allow_hosts:\n", `line 3: tool "http_request": allow_hosts: the list is empty`},
		{"anyone in a list", "tools:\n  a:\n    approvers: [anyone]\n", `"anyone" is not a Slack user ID`},
		{"quoted anyone is a name", "tools:\n  a:\n    approvers: Anyone\n", `approvers: want a list`},
		{"call cap zero", "max_calls_per_turn: 0\ntools: {}\n", `line 1: max_calls_per_turn: want a whole number from 1 to 100, got "0"`},
		{"call cap not a number", "max_calls_per_turn: many\ntools: {}\n", `line 1: max_calls_per_turn: want a whole number`},
		{"call cap too large", "max_calls_per_turn: 1000\ntools: {}\n", `max_calls_per_turn: want a whole number from 1 to 100`},
		{"bad approval", "tools:\n  a:\n    approval: sometimes\n", `line 3: tool "a": approval: want "required" or "never", got "sometimes"`},
		{"approval is case-sensitive", "tools:\n  a:\n    approval: Never\n", `want "required" or "never", got "Never"`},
		{"bad duration", "tools:\n  a:\n    expires_after: soon\n", `line 3: tool "a": expires_after: "soon" is not a duration like 24h, 90m or 7d`},
		{"number without unit", "tools:\n  a:\n    expires_after: 30\n", `"30" is not a duration`},
		{"zero duration", "tools:\n  a:\n    expires_after: 0s\n", `"0s" is not a positive duration`},
		{"negative days", "tools:\n  a:\n    expires_after: -1d\n", `"-1d" is not a positive duration`},
		{"fractional days", "tools:\n  a:\n    expires_after: 1.5d\n", `"1.5d" is not a duration`},
		{"approver name", "tools:\n  a:\n    approvers: [bob]\n", `line 3: tool "a": approvers: "bob" is not a Slack user ID (U…, W…) or user-group ID (S…)`},
		{"approvers not a list", "tools:\n  a:\n    approvers: U1\n", `approvers: want a list`},
		{"self_approval not a bool", "tools:\n  a:\n    self_approval: maybe\n", `self_approval: want true or false`},
		{"allow_hosts on another tool", "tools:\n  a:\n    allow_hosts: [x.com]\n", `line 3: allow_hosts applies only to http_request, not to "a"`},
		{"allow_hosts with a scheme", "tools:\n  http_request:\n    allow_hosts: [\"https://x.com\"]\n", `"https://x.com" is not a host or host:port`},
		{"allow_hosts with a bad port", "tools:\n  http_request:\n    allow_hosts: [\"x.com:99999\"]\n", `"x.com:99999" is not a host or host:port`},
		{"repeated key", "tools:\n  a:\n    approval: never\n    approval: required\n", `line 4: key "approval" in tool "a" is repeated`},
		{"tool listed twice", "tools:\n  a: {}\n  a: {}\n", `line 3: tool "a" is listed twice`},
		{"rule not a mapping", "tools:\n  a: [1]\n", `line 2: tool "a": want a mapping of settings`},
		{"empty file", "", "policy is empty"},
		{"no tools section", "# nothing\n{}\n", "missing tools: section"},
		{"not YAML", "tools: [\n", "yaml: "},
		{"quorum zero", "tools:\n  a:\n    approvals_required: 0\n", `line 3: tool "a": approvals_required: want a whole number from 1 to 20, got "0"`},
		{"quorum not a number", "tools:\n  a:\n    approvals_required: two\n", `line 3: tool "a": approvals_required: want a whole number from 1 to 20, got "two"`},
		{"quorum a string", "tools:\n  a:\n    approvals_required: \"2\"\n", `approvals_required: want a whole number`},
		{"quorum too large", "tools:\n  a:\n    approvals_required: 21\n", `approvals_required: want a whole number from 1 to 20`},
		{"quorum larger than the approvers", "tools:\n  a:\n    approvals_required: 3\n    approvers: [U0BOB, U0CAROL]\n",
			`line 3: tool "a": approvals_required: 3 approvals are required but approvers lists 2 people`},
		{"an approver listed twice counts once", "tools:\n  a:\n    approvers: [U0BOB, U0BOB]\n    approvals_required: 2\n",
			`line 4: tool "a": approvals_required: 2 approvals are required but approvers lists 1 person`},
		{"decisions not a list", "tools:\n  a:\n    decisions: approve\n", `line 3: tool "a": decisions: want a list of decisions, e.g. [approve, reject], got "approve"`},
		{"decisions empty", "tools:\n  a:\n    decisions: []\n", `decisions: the list is empty; leave decisions out`},
		{"unknown decision", "tools:\n  a:\n    decisions: [approve, respond]\n", `line 3: tool "a": decisions: "respond" is not a decision: want approve, edit, reject`},
		{"decision listed twice", "tools:\n  a:\n    decisions: [approve, reject, approve]\n", `decisions: "approve" is listed twice`},
		{"decisions without approve", "tools:\n  a:\n    decisions: [edit, reject]\n", `line 3: tool "a": decisions: the list must include approve`},
		{"confirm not a bool", "tools:\n  a:\n    confirm: please\n", `line 3: tool "a": confirm: want true or false`},
		{"repeated quorum", "tools:\n  a:\n    approvals_required: 2\n    approvals_required: 3\n", `line 4: key "approvals_required" in tool "a" is repeated`},
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

// approvers: anyone is the anyone-may-approve rule.
func TestApproversAnyone(t *testing.T) {
	t.Parallel()
	p, err := tools.ParsePolicy([]byte("tools:\n  a:\n    approvers: anyone\n    self_approval: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := p.RuleFor("a")
	for _, who := range []string{"U0BOB", "W0CAROL"} {
		if ok, why, err := r.MayApprove(who, "U0ALICE", nil); !ok || err != nil {
			t.Errorf("MayApprove(%s) = %v, %q, %v; want anyone may approve", who, ok, why.Why, err)
		}
	}
	if ok, _, _ := r.MayApprove("U0ALICE", "U0ALICE", nil); ok {
		t.Error("MayApprove(requester) = true with self_approval: false")
	}
}

func TestMaxCallsPerTurn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		yaml string
		want int
	}{
		{"tools: {}\n", tools.DefaultMaxCallsPerTurn},
		{"max_calls_per_turn: 3\ntools: {}\n", 3},
	}
	for _, tt := range tests {
		p, err := tools.ParsePolicy([]byte(tt.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if got := p.CallsPerTurn(); got != tt.want {
			t.Errorf("ParsePolicy(%q).CallsPerTurn() = %d, want %d", tt.yaml, got, tt.want)
		}
	}
	if got := tools.DefaultPolicy().CallsPerTurn(); got != 10 {
		t.Errorf("DefaultPolicy().CallsPerTurn() = %d, want 10", got)
	}
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{
		designPolicy,
		"tools: {}\n",
		"max_calls_per_turn: 3\ntools:\n  a:\n    approvers: anyone\n",
		"tools:\n  http_request:\n    allow_hosts: any\n",
		"tools:\n  a:\n    approvers: []\n",
		"tools:\n  a: &x {approval: never}\n  b: *x\n",
		"tools: [\n",
		reachPolicy,
		"tools:\n  a:\n    escalate_after: 1h\n",
		"tools:\n  a:\n    remind_after: 2s\n    remind_times: 2\n    expires_after: 9s\n",
		"tools:\n  a:\n    approvers: [U1, U2]\n    approvals_required: 2\n    decisions: [approve, reject]\n    confirm: true\n",
		"tools:\n  a:\n    approvers: [U1]\n    approvals_required: 2\n",
		"tools:\n  a: {decisions: [edit], approvals_required: 0}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := tools.ParsePolicy(data)
		if err != nil {
			if !strings.Contains(err.Error(), "line ") && !strings.Contains(err.Error(), "yaml") && !strings.Contains(err.Error(), "policy is empty") {
				t.Errorf("ParsePolicy(%q) error %q names no line", data, err)
			}
			return
		}
		if p.Default != nil {
			t.Errorf("ParsePolicy(%q).Default is set: a file offers only the tools it lists", data)
		}
		if n := p.CallsPerTurn(); n < 1 || n > 100 {
			t.Errorf("ParsePolicy(%q).CallsPerTurn() = %d", data, n)
		}
		for name, r := range p.Tools {
			if r.ExpiresAfter <= 0 {
				t.Errorf("ParsePolicy(%q): tool %q expires after %v", data, name, r.ExpiresAfter)
			}
			if r.Approvers != nil && len(r.Approvers) == 0 || r.AllowHosts != nil && len(r.AllowHosts) == 0 {
				t.Errorf("ParsePolicy(%q): tool %q has an empty list, which would mean anyone", data, name)
			}
			checkReachInvariants(t, data, name, r)
			checkQuorumRule(t, data, name, r)
		}
		for name, s := range p.MCPServers {
			checkQuorumRule(t, data, name, s.Rule)
		}
	})
}

// checkQuorumRule checks what a parsed rule says about quorum and
// decisions: a quorum from 1 to 20 that its listed people can reach, and
// decisions that always include approve.
func checkQuorumRule(t *testing.T, data []byte, name string, r tools.Rule) {
	t.Helper()
	if n := r.Required(); n < 1 || n > tools.MaxApprovalsRequired {
		t.Errorf("ParsePolicy(%q): tool %q requires %d approvals", data, name, n)
	}
	if !r.Offers(tools.DecisionApprove) {
		t.Errorf("ParsePolicy(%q): tool %q does not offer approve", data, name)
	}
	users := map[string]bool{}
	groups := false
	for _, a := range r.Approvers {
		users[a] = true
		groups = groups || strings.HasPrefix(a, "S")
	}
	if len(r.Approvers) > 0 && !groups && r.Required() > len(users) {
		t.Errorf("ParsePolicy(%q): tool %q requires %d approvals of %d people", data, name, r.Required(), len(users))
	}
	for _, d := range r.Decisions {
		if d != tools.DecisionApprove && d != tools.DecisionEdit && d != tools.DecisionReject {
			t.Errorf("ParsePolicy(%q): tool %q offers the decision %q", data, name, d)
		}
	}
}

func TestRuleQuorumAndDecisions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		rule     tools.Rule
		required int
		offered  []string
	}{
		{"zero value", tools.Rule{}, 1, []string{"approve", "edit", "reject"}},
		{"default rule", tools.DefaultRule(), 1, []string{"approve", "edit", "reject"}},
		{"two approvers, no edit", tools.Rule{ApprovalsRequired: 2, Decisions: []string{"approve", "reject"}}, 2, []string{"approve", "reject"}},
		{"approve only", tools.Rule{Decisions: []string{"approve"}}, 1, []string{"approve"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Required(); got != tt.required {
				t.Errorf("Required() = %d, want %d", got, tt.required)
			}
			if got := tt.rule.OfferedDecisions(); !reflect.DeepEqual(got, tt.offered) {
				t.Errorf("OfferedDecisions() = %v, want %v", got, tt.offered)
			}
			if tt.rule.Offers("respond") {
				t.Error(`Offers("respond") = true; only approve, edit and reject are offered`)
			}
		})
	}
}

func TestLoadPolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(good, []byte(designPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := tools.LoadPolicy(good)
	if err != nil {
		t.Fatalf("LoadPolicy(%q) error = %v", good, err)
	}
	if _, ok := p.RuleFor("http_request"); !ok {
		t.Errorf("LoadPolicy(%q): http_request not offered", good)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("tools:\n  a:\n    nope: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tools.LoadPolicy(bad); err == nil || !strings.Contains(err.Error(), bad+": line 3: ") {
		t.Errorf("LoadPolicy(%q) error = %v, want it to name the file and line", bad, err)
	}

	missing := filepath.Join(dir, "missing.yaml")
	if _, err := tools.LoadPolicy(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadPolicy(%q) error = %v, want os.ErrNotExist", missing, err)
	}
}

func TestDefaultPolicy(t *testing.T) {
	t.Parallel()
	p := tools.DefaultPolicy()
	want := tools.Rule{Approval: tools.ApprovalRequired, SelfApproval: true, ExpiresAfter: 24 * time.Hour}
	for _, name := range []string{"http_request", "anything_else"} {
		got, ok := p.RuleFor(name)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("DefaultPolicy().RuleFor(%q) = %+v, %v; want %+v, true", name, got, ok, want)
		}
		if !got.NeedsApproval() {
			t.Errorf("DefaultPolicy().RuleFor(%q).NeedsApproval() = false, want true", name)
		}
	}
}

func TestPolicyRuleFor(t *testing.T) {
	t.Parallel()
	p, err := tools.ParsePolicy([]byte(designPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := p.RuleFor("unlisted"); ok {
		t.Errorf("RuleFor(%q) = %+v, true; want not offered", "unlisted", r)
	}
}

func TestApprovalText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a    tools.Approval
		text string
	}{
		{tools.ApprovalRequired, "required"},
		{tools.ApprovalNever, "never"},
	}
	for _, tt := range tests {
		b, err := tt.a.MarshalText()
		if err != nil || string(b) != tt.text {
			t.Errorf("MarshalText(%v) = %q, %v; want %q", tt.a, b, err, tt.text)
		}
		if tt.a.String() != tt.text {
			t.Errorf("String(%d) = %q, want %q", int(tt.a), tt.a.String(), tt.text)
		}
		var got tools.Approval
		if err := got.UnmarshalText([]byte(tt.text)); err != nil || got != tt.a {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", tt.text, got, err, tt.a)
		}
	}
	if _, err := tools.Approval(7).MarshalText(); err == nil {
		t.Errorf("MarshalText(Approval(7)) error = nil, want an error")
	}
	var a tools.Approval
	if err := a.UnmarshalText([]byte("maybe")); err == nil {
		t.Errorf("UnmarshalText(%q) error = nil, want an error", "maybe")
	}
}

func TestMayApprove(t *testing.T) {
	t.Parallel()
	groups := map[string][]string{"S0OPS": {"U0CAROL"}}
	inGroup := func(group, user string) (bool, error) {
		if group == "S0BROKEN" {
			return false, errors.New("slack is down")
		}
		for _, u := range groups[group] {
			if u == user {
				return true, nil
			}
		}
		return false, nil
	}
	errBroken := errors.New("any error")

	tests := []struct {
		name      string
		rule      tools.Rule
		approver  string
		requester string
		ok        bool
		reason    string
		err       error
	}{
		{"anyone, someone else", tools.Rule{SelfApproval: true}, "U0BOB", "U0ALICE", true, "", nil},
		{"anyone, self allowed", tools.Rule{SelfApproval: true}, "U0ALICE", "U0ALICE", true, "", nil},
		{"anyone, self forbidden", tools.Rule{}, "U0ALICE", "U0ALICE", false, "you asked for this call and may not approve it yourself", nil},
		{"anyone, self forbidden, someone else", tools.Rule{}, "U0BOB", "U0ALICE", true, "", nil},
		{"listed user", tools.Rule{Approvers: []string{"U0BOB"}}, "U0BOB", "U0ALICE", true, "", nil},
		{"unlisted user", tools.Rule{Approvers: []string{"U0BOB", "S0OPS"}}, "U0DAVE", "U0ALICE", false, "only user U0BOB, group S0OPS may approve this call", nil},
		{"group member", tools.Rule{Approvers: []string{"U0BOB", "S0OPS"}}, "U0CAROL", "U0ALICE", true, "", nil},
		{"listed but self forbidden", tools.Rule{Approvers: []string{"U0ALICE"}}, "U0ALICE", "U0ALICE", false, "you asked for this call and may not approve it yourself", nil},
		{"listed and self allowed", tools.Rule{Approvers: []string{"U0ALICE"}, SelfApproval: true}, "U0ALICE", "U0ALICE", true, "", nil},
		{"group lookup fails", tools.Rule{Approvers: []string{"S0BROKEN"}}, "U0CAROL", "U0ALICE", false, "", errBroken},
		{"group lookup fails, other group matches", tools.Rule{Approvers: []string{"S0BROKEN", "S0OPS"}}, "U0CAROL", "U0ALICE", true, "", nil},
		{"no approver", tools.Rule{SelfApproval: true}, "", "U0ALICE", false, "the approver is unknown", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, denial, err := tt.rule.MayApprove(tt.approver, tt.requester, inGroup)
			reason := denial.Why
			if ok != tt.ok || reason != tt.reason || (err != nil) != (tt.err != nil) {
				t.Errorf("MayApprove(%q, %q) = %v, %q, %v; want %v, %q, error %v",
					tt.approver, tt.requester, ok, reason, err, tt.ok, tt.reason, tt.err != nil)
			}
		})
	}
}

func TestMayApproveWithoutGroupLookup(t *testing.T) {
	t.Parallel()
	r := tools.Rule{Approvers: []string{"U0BOB", "S0OPS"}}
	if ok, _, err := r.MayApprove("U0BOB", "U0ALICE", nil); !ok || err != nil {
		t.Errorf("MayApprove(U0BOB) = %v, %v; want true, nil: a listed user needs no group lookup", ok, err)
	}
	if ok, _, err := r.MayApprove("U0CAROL", "U0ALICE", nil); ok || err == nil {
		t.Errorf("MayApprove(U0CAROL) = %v, %v; want false and an error", ok, err)
	}
}

func TestIsGroupID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		want bool
	}{
		{"S0OPS", true},
		{"S", false},
		{"U0BOB", false},
		{"s0ops", false},
		{"S0OPS>", false},
		{"S0OPS|x", false},
		{"S" + strings.Repeat("A", 31), true},
		{"S" + strings.Repeat("A", 32), false},
	}
	for _, tt := range tests {
		if got := tools.IsGroupID(tt.id); got != tt.want {
			t.Errorf("IsGroupID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestNameIDs(t *testing.T) {
	t.Parallel()
	if got, want := tools.NameIDs([]string{"U0BOB", "S0OPS", ""}), "user U0BOB, group S0OPS, someone"; got != want {
		t.Errorf("NameIDs = %q, want %q", got, want)
	}
}
