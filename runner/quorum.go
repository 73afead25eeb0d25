package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/tools"
)

// Quorum: a call whose rule requires several approvals (approvals_required)
// is decided when the last of them lands. Each approval is recorded in the
// store with the call's decision round and the hash of the arguments it
// approves; one atomic step adds it and, when the count is reached, claims
// the decision, so that of any number of concurrent clicks on any number
// of replicas exactly one decides, and the call runs once. One Reject (or
// a reply, or the expiry) claims the decision at once. An Edit claims the
// round too: applying it makes the call wait again with the edited
// arguments in its next revision, whose approvals start from none.
//
// A front end learns of the progress from ApprovalProgress events, shown
// once per count, and asks Gate what to offer.

// Approvals gathers the approvals of calls that need several before their
// decision is claimed. Implementations must be safe for concurrent use by
// many goroutines and processes: each person counts once per Set, and the
// decision is claimed once, by the approval that completes the count.
type Approvals interface {
	// Approve records a.By's approval in a.Set unless a.Key is claimed
	// already (nothing is recorded; Winner is the claim) or a.By is in
	// a.Set already (nothing is recorded). When a.Set then holds
	// a.Required approvals, it claims a.Key with a.Value, a newline and
	// a.Set's approvals. Set is a claim key of the thread: Claims lists
	// it, and it expires with the thread's claims.
	Approve(ctx context.Context, thread string, a Approval) (Approved, error)
}

// Approval is one person's approval toward the decision on a call that
// needs several.
type Approval struct {
	// Key is the claim that decides the call (see Claims.Claim).
	Key string
	// Set names the approvals that count toward Key: those of the same
	// arguments in the same decision round.
	Set string
	// By is who approved, and Entry what to keep of the approval. Neither
	// may be empty or hold a newline, nor By a tab.
	By    string
	Entry []byte
	// Required is how many approvals in Set decide the call (at least 1).
	Required int
	// Value is the decision claimed under Key when they are in.
	Value []byte
}

// Approved is what Approve did. Approvals are Set's approvals after it,
// oldest first, one line each: By, a tab, Entry, a newline.
type Approved struct {
	// Recorded: By's approval was added to Set.
	Recorded bool
	// Won: it was the last one required, and this call set Key.
	Won bool
	// Winner is Key's claim, when Key is set (by this call, or before it).
	Winner    []byte
	Approvals []byte
}

// ErrBadApproval: an Approval that cannot be stored as it stands.
var ErrBadApproval = errors.New("an approval needs a Key, a Set, a Required count, and a By and an Entry without newlines (and a By without tabs)")

// CheckApproval reports an Approval a store must refuse, with
// ErrBadApproval.
func CheckApproval(a Approval) error {
	if a.Key == "" || a.Set == "" || a.Set == a.Key || a.Required < 1 || a.By == "" || len(a.Entry) == 0 ||
		strings.ContainsAny(a.By, "\t\n") || bytes.ContainsRune(a.Entry, '\n') {
		return ErrBadApproval
	}
	return nil
}

// ApprovalClaim is what ClaimApproval is asked.
type ApprovalClaim struct {
	Thread string
	Approval
	ExpectHead string
	WakeBy     time.Time
	LeaseOwner string
	LeaseTTL   time.Duration
	Keys       []string
}

// ApprovalClaimed is what ClaimApproval did; Token is the lease's
// acquisition, when Leased.
type ApprovalClaimed struct {
	Approved
	Leased bool
	Token  string
	Head   string
	Claims map[string][]byte
}

// approvalsKey names the approvals of c's current arguments in its
// current decision round.
func approvalsKey(c agent.Call) string { return "approvals:" + claimKey(c) + ":" + c.RunHash() }

// progressKey records that people were shown c's card with n approvals.
func progressKey(c agent.Call, n int) string {
	return "progress:" + claimKey(c) + "#" + strconv.Itoa(n)
}

// announceKey records that c's card was posted: once per attempt, however
// often its arguments are edited (the card is updated instead).
func announceKey(c agent.Call) string {
	return roundKey("announced:decision:", c.Key, c.Attempts, 0)
}

// quorumKeys are the claims the service reads about a waiting call that
// needs several approvals: its approvals and what was shown of them.
func quorumKeys(c agent.Call) []string {
	if c.Status != agent.Pending || c.Quorum() < 2 {
		return nil
	}
	keys := []string{approvalsKey(c)}
	for n := range c.Quorum() {
		keys = append(keys, progressKey(c, n))
	}
	return keys
}

// decisionJSON is a claim's decision as json.Marshal writes it, in a
// buffer made to its size.
func decisionJSON(d agent.Decision) ([]byte, error) {
	return d.AppendJSON(make([]byte, 0, 128+len(d.By)+len(d.Args)+len(d.Reason)+len(d.Hash)+64*len(d.Approvals)))
}

// decodeClaim reads a decision claim: the decision's JSON, followed, for
// an approval that completed a quorum, by a newline and the approvals.
func decodeClaim(raw []byte) (agent.Decision, error) {
	head, lines, quorum := bytes.Cut(raw, []byte("\n"))
	var d agent.Decision
	if err := d.DecodeJSON(head); err != nil {
		return d, err
	}
	if quorum {
		d.Approvals = parseApprovals(lines)
	}
	return d, nil
}

// parseApprovals reads the approvals Approve keeps, skipping lines it
// cannot read.
func parseApprovals(lines []byte) []agent.Approval {
	var out []agent.Approval
	for line := range bytes.SplitSeq(lines, []byte("\n")) {
		by, entry, ok := bytes.Cut(line, []byte("\t"))
		if !ok {
			continue
		}
		var a agent.Approval
		if json.Unmarshal(entry, &a) != nil {
			continue
		}
		a.By = string(by) // the store's word on who approved
		out = append(out, a)
	}
	return out
}

// approvalsOf returns the approvals recorded for c's current arguments in
// its current round, as claims hold them.
func approvalsOf(claims map[string][]byte, c agent.Call) []agent.Approval {
	if c.Quorum() < 2 {
		return nil
	}
	return parseApprovals(claims[approvalsKey(c)])
}

// alreadyApprovedError: the person approved the call already.
type alreadyApprovedError struct{ have, need int }

func (e *alreadyApprovedError) Error() string { return "approved already" }

// why is what to tell the person who approved again.
func (e *alreadyApprovedError) why() string {
	more := e.need - e.have
	return fmt.Sprintf("you have approved this call already (%d of %d approvals); it needs %d more %s from someone else",
		e.have, e.need, more, plural(more, "approval", "approvals"))
}

// approve records d, an approval of c, a call that needs several, and
// claims the decision if it completes them: nil when it was recorded
// (decided or not), *AlreadyDecidedError if the call was decided first,
// *alreadyApprovedError if d.By approved it already, or ErrStale if
// expectHead is set and no longer the thread's head.
func (s *Service) approve(ctx context.Context, thread string, c agent.Call, d agent.Decision, expectHead string) error {
	entry, err := json.Marshal(agent.Approval{By: d.By, At: d.At})
	if err != nil {
		return err
	}
	value, err := decisionJSON(d)
	if err != nil {
		return err
	}
	a := Approval{Key: claimKey(c), Set: approvalsKey(c), By: d.By, Entry: entry, Required: c.Quorum(), Value: value}
	// As with a claim, the thread is woken first: should this process die
	// before showing the approval (or applying the decision), another
	// does it within a lease.
	var wake time.Time
	if s.opts.Schedule {
		wake = s.opts.Now().Add(s.opts.LeaseTTL)
	}
	var keys []string
	if cached, ok := s.graph.Cached(thread); ok {
		keys = neededKeys(cached)
	}
	sent := time.Now()
	r, err := s.store.ClaimApproval(ctx, ApprovalClaim{Thread: thread, Approval: a, ExpectHead: expectHead, WakeBy: wake,
		LeaseOwner: s.opts.Owner, LeaseTTL: s.opts.LeaseTTL, Keys: keys})
	got := r.Approved
	if err == nil && r.Leased {
		// The lease is kept for the drive that follows, as a claim's is.
		s.keepLeased(thread, r.Token, r.Head, r.Claims, keys, sent)
	}
	if err != nil {
		return fmt.Errorf("approve %s: %w", c.Key, err)
	}
	approvals := parseApprovals(got.Approvals)
	log := s.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key, "by": d.By, "approvals": len(approvals), "required": a.Required})
	fields := decisionFields(d)
	fields["approvals"] = fmt.Sprintf("%d of %d", len(approvals), a.Required)
	switch {
	case got.Won:
		log.WithField("decision", d.Kind.String()).Info("decision claimed")
		var waited time.Duration
		if !c.Since.IsZero() && !d.At.IsZero() {
			waited = d.At.Sub(c.Since)
		}
		s.opts.Observer.Decided(d.Kind, waited)
		approvers := make([]string, len(approvals))
		for i, a := range approvals {
			approvers[i] = a.By
		}
		fields["approved_by"] = strings.Join(approvers, ",")
		s.audit(ctx, thread, c, fields)
		return nil
	case got.Recorded:
		log.Info("approval recorded")
		fields["decision"] = "approval"
		s.audit(ctx, thread, c, fields)
		return nil
	case got.Winner != nil:
		first, err := decodeClaim(got.Winner)
		if err != nil {
			return fmt.Errorf("approve %s: %w", c.Key, err)
		}
		return &AlreadyDecidedError{Key: c.Key, Decision: first}
	}
	return &alreadyApprovedError{have: len(approvals), need: a.Required}
}

// decideClaim records decision d on c: toward its quorum if it is an
// approval of a call that needs several, else as its claim.
func (s *Service) decideClaim(ctx context.Context, thread string, c agent.Call, d agent.Decision, expectHead string) error {
	if d.Kind == agent.Approve && c.Status == agent.Pending && c.Quorum() > 1 {
		return s.approve(ctx, thread, c, d, expectHead)
	}
	return s.claim(ctx, thread, c, d, expectHead)
}

// notOffered says why decision kind may not be made on c under its rule
// ("" if it may): a rule's decisions: leaves some out. Withdrawing one's
// own request is always allowed.
func notOffered(rule tools.Rule, c *agent.Call, kind agent.Kind, requester bool) string {
	if c.Status != agent.Pending {
		return "" // the choices of an outcome-unknown call are its own
	}
	switch kind {
	case agent.Approve, agent.Edit, agent.Reject:
	default:
		return ""
	}
	if rule.Offers(kind.String()) || (kind == agent.Reject && requester) {
		return ""
	}
	offered := rule.OfferedDecisions()
	return fmt.Sprintf("the policy offers only %s for %s, not %s", andList(offered), c.Tool, kind)
}

// Gate is what a front end shows about deciding a waiting call: how many
// approvals it needs and has, who may decide, which decisions are
// offered, and whether approving asks for a confirmation. It is shown,
// never trusted: Decide applies the rules.
type Gate struct {
	// Required is how many distinct people must approve the call;
	// Approvals are those given so far to its current arguments, oldest
	// first.
	Required  int
	Approvals []agent.Approval
	// Approvers are who may decide: Slack user and user-group IDs; none
	// means anyone in the channel. Requester is who asked for the call,
	// and may approve it only if SelfApproval.
	Approvers    []string
	Requester    string
	SelfApproval bool
	// Decisions are the decisions offered on the call: Approve, and Edit
	// and Reject unless the policy leaves them out.
	Decisions []agent.Kind
	// Confirm: approving asks "are you sure?" first.
	Confirm bool
}

// Offers reports whether the gate offers decision k.
func (g Gate) Offers(k agent.Kind) bool { return slices.Contains(g.Decisions, k) }

// Approved reports whether who has approved already.
func (g Gate) Approved(who string) bool {
	return slices.ContainsFunc(g.Approvals, func(a agent.Approval) bool { return a.By == who })
}

// HasNews reports whether the card of c, which needs several approvals,
// has more to show than it did when first posted: approvals, or an
// edit's reset of them.
func (g *Gate) HasNews(c agent.Call) bool {
	return g != nil && g.Required >= 2 && (len(g.Approvals) > 0 || c.Revision > 0)
}

// Missing is how many more approvals the call needs.
func (g Gate) Missing() int { return max(0, g.Required-len(g.Approvals)) }

// StillToApprove are the listed approvers who may still approve: those
// who have not, without the requester unless SelfApproval. User groups
// stay (another of their members may approve). Empty when anyone may.
func (g Gate) StillToApprove() []string {
	var out []string
	for _, id := range g.Approvers {
		if g.Approved(id) || (!g.SelfApproval && id == g.Requester) {
			continue
		}
		out = append(out, id)
	}
	return out
}

// Reachable reports whether the approvals the call still needs can be
// given: false when the approvers are people only and too few of them
// are left.
func (g Gate) Reachable() bool {
	if len(g.Approvers) == 0 {
		return true
	}
	for _, id := range g.Approvers {
		if tools.IsGroupID(id) {
			return true
		}
	}
	return len(g.StillToApprove()) >= g.Missing()
}

// gate returns c's gate, with the approvals claims hold.
func (s *Service) gate(st *agent.State, c agent.Call, claims map[string][]byte) *Gate {
	if c.Status != agent.Pending {
		return nil
	}
	rule, _ := s.agent.Rule(c.Tool)
	g := &Gate{Required: c.Quorum(), Approvals: approvalsOf(claims, c), Approvers: rule.Approvers,
		Requester: c.AskedBy(st), SelfApproval: rule.SelfApproval, Confirm: rule.Confirm}
	offered := rule.OfferedDecisions()
	if len(offered) > 0 {
		g.Decisions = make([]agent.Kind, 0, len(offered))
	}
	for _, d := range offered {
		if k, ok := agent.ParseKind(d); ok {
			g.Decisions = append(g.Decisions, k)
		}
	}
	return g
}

// Gate returns what to show about deciding the thread's waiting call c
// (see Gate); nil if c does not wait to be approved.
func (s *Service) Gate(ctx context.Context, thread string, st *agent.State, c agent.Call) (*Gate, error) {
	claims := map[string][]byte{}
	if keys := quorumKeys(c); len(keys) > 0 {
		var err error
		if claims, err = s.store.ClaimValues(ctx, thread, keys[:1]); err != nil {
			return nil, err
		}
	}
	return s.gate(st, c, claims), nil
}

// andList joins words with commas and a final "and".
func andList(words []string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
