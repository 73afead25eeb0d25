package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/tools"
)

// The inbox: the calls that wait for a person's decision, across
// threads, so that a front end can show each person what waits for them
// (Slack's Home tab, "bot approvals list"), and what each person decided
// lately.
//
// The service keeps the index in step with the runs: when a session on a
// thread ends (CloseThread, in the same round trip where the store can),
// the thread's entries are replaced with the calls that wait in its
// latest state, and the decisions the session applied are added to their
// deciders' lists. The index is a guide, not the truth: WaitingCalls
// checks every entry against its thread before showing it — a call that
// was decided meanwhile (claimed, not yet applied), has run, or whose
// thread is gone is never shown as waiting — and the runner decides every
// click with Decide as it does any other.
//
// Only pending calls are indexed; a call whose outcome is unknown after a
// crash is settled in its thread.

// InboxEntry is a call that waits for a decision, as the index keeps it:
// enough to tell whom it waits for without loading its thread. Approvers
// and SelfApproval are its tool's rule when the call began to wait.
type InboxEntry struct {
	Thread string `json:"thread"`
	Call   string `json:"call"`
	// Round is the call's decision round (its Attempts), as a card shows it.
	Round     int    `json:"round,omitempty"`
	Tool      string `json:"tool"`
	Requester string `json:"requester,omitempty"`
	Team      string `json:"team,omitempty"`
	Channel   string `json:"channel,omitempty"`
	// Since is when the call began to wait; Expires when it expires.
	Since   time.Time `json:"since,omitzero"`
	Expires time.Time `json:"expires,omitzero"`
	// Approvers are user and user-group IDs; none means anyone in the
	// channel.
	Approvers    []string `json:"approvers,omitempty"`
	SelfApproval bool     `json:"self_approval,omitempty"`
}

// same reports whether e and o are the same call in the same round.
func (e InboxEntry) same(o InboxEntry) bool {
	return e.Thread == o.Thread && e.Call == o.Call && e.Round == o.Round
}

// DecisionRecord is a decision a person made, for their list of recent
// decisions.
type DecisionRecord struct {
	Thread  string     `json:"thread"`
	Call    string     `json:"call"`
	Round   int        `json:"round,omitempty"`
	Tool    string     `json:"tool"`
	Team    string     `json:"team,omitempty"`
	Channel string     `json:"channel,omitempty"`
	By      string     `json:"by"`
	Kind    agent.Kind `json:"kind"`
	At      time.Time  `json:"at"`
	// Reason is a rejection's reason, shortened to RecentReasonLen.
	Reason string `json:"reason,omitempty"`
}

// RecentLimit is how many decisions a person's list keeps;
// RecentReasonLen how much of a reason it keeps.
const (
	RecentLimit     = 20
	RecentReasonLen = 200
)

// InboxUpdate is what a session ending on a thread changes in the index.
type InboxUpdate struct {
	Thread string
	// Waiting are the thread's calls that wait now: they replace its
	// entries (none: the thread leaves the index).
	Waiting []InboxEntry
	// Decided are decisions applied in the thread, each added to its
	// decider's list.
	Decided []DecisionRecord
	// Replaced is set by the store: the entries Waiting replaced.
	Replaced []InboxEntry
	// Watchers may be set by the store, read in the same step: who
	// watches the index in a front end (the Slack Home tab), nil if the
	// store does not say.
	Watchers []InboxWatcher
}

// InboxWatcher is a person who looks at the index in a front end, and
// when they last opened it.
type InboxWatcher struct {
	User string
	At   time.Time
}

// WatchersSince returns the users of ch.Watchers who opened the index
// since then.
func (ch *InboxChange) WatchersSince(since time.Time) []string {
	var users []string
	for _, w := range ch.Watchers {
		if !w.At.Before(since) {
			users = append(users, w.User)
		}
	}
	return users
}

// Inbox keeps the index of waiting calls and people's recent decisions.
// Implementations must be safe for concurrent use by many goroutines and
// processes; each call is atomic.
type Inbox interface {
	// UpdateInbox replaces u.Thread's entries with u.Waiting, puts each
	// of u.Decided first in its decider's list (keeping the newest
	// RecentLimit, for as long as the store keeps threads), and sets
	// u.Replaced to the entries it replaced.
	UpdateInbox(ctx context.Context, u *InboxUpdate) error
	// InboxEntries returns the entries of every thread.
	InboxEntries(ctx context.Context) ([]InboxEntry, error)
	// RecentDecisions returns up to n of user's decisions, newest first.
	RecentDecisions(ctx context.Context, user string, n int) ([]DecisionRecord, error)
}

// Members tells whether a user is a member of a channel. A person who
// decides from an inbox, outside the call's channel, may decide a call
// whose rule names no approvers ("anyone in the channel") only if they
// are a member of it. It must be safe for concurrent use.
//
// InChannel is the check that lets a person decide: it must not answer
// from a memory that a known change made out of date.
type Members interface {
	InChannel(ctx context.Context, channel, user string) (bool, error)
}

// RememberedMembers is a Members that can also answer from memory, for
// what only shows whom a call waits for (WaitsFor), never for a decision.
type RememberedMembers interface {
	InChannelRemembered(ctx context.Context, channel, user string) (bool, error)
}

// InboxChange is what an InboxChanged event says changed in the index.
type InboxChange struct {
	Added, Removed []InboxEntry
	Decided        []DecisionRecord
	// Watchers are InboxUpdate.Watchers: nil if the store did not say.
	Watchers []InboxWatcher
}

// Waiting is a call that waits for a decision, for an inbox to show: its
// index entry, and the call as its thread holds it (arguments, hash, the
// model's reason).
type Waiting struct {
	InboxEntry
	AgentCall agent.Call
	// Gate is what to show about deciding it (the decisions its rule
	// offers, whether Approve asks first, a quorum's approvals), as its
	// card shows it.
	Gate *Gate
}

// InboxQuery says which waiting calls WaitingCalls returns.
type InboxQuery struct {
	// User, if set, keeps the calls that wait for them (see WaitsFor).
	User string
	// Where, if set, keeps the entries it accepts (a front end's own
	// threads, say).
	Where func(InboxEntry) bool
	// Limit, if above 0, is how many calls at most.
	Limit int
}

// WaitingCalls returns the calls that wait for a person's decision,
// across threads, newest first, those q asks for. Each is checked against
// its thread — still pending in the same round, no decision claimed on
// it — so a decision made a moment ago hides it at once. Entries of
// threads that no longer exist are dropped from the index.
func (s *Service) WaitingCalls(ctx context.Context, q InboxQuery) ([]Waiting, error) {
	user, n := q.User, q.Limit
	if !s.opts.Inbox {
		return nil, nil
	}
	entries, err := s.store.InboxEntries(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(entries, func(a, b InboxEntry) int {
		return cmp.Or(b.Since.Compare(a.Since), strings.Compare(a.Thread, b.Thread), strings.Compare(a.Call, b.Call))
	})
	var out []Waiting
	states := map[string]*graph.Result[agent.State]{}
	for _, e := range entries {
		if n > 0 && len(out) >= n {
			break
		}
		if q.Where != nil && !q.Where(e) {
			continue
		}
		if user != "" {
			ok, err := s.WaitsFor(ctx, e, user)
			if err != nil {
				// Not knowing is not "it does not wait for them": the
				// list would be wrong without saying so.
				s.log.WithFields(logrus.Fields{"thread": e.Thread, "call": e.Call, "user": user}).WithError(err).Warn("checking whom a call waits for")
				return nil, fmt.Errorf("waiting calls of %s: %w", user, err)
			}
			if !ok {
				continue
			}
		}
		res, seen := states[e.Thread]
		if !seen {
			res, err = s.graph.State(ctx, e.Thread)
			if errors.Is(err, graph.ErrNoCheckpoint) {
				s.forgetInbox(ctx, e.Thread)
				states[e.Thread] = nil
				continue
			}
			if err != nil {
				return nil, err
			}
			states[e.Thread] = res
		}
		if res == nil || res.Status() != graph.Paused {
			continue
		}
		c, ok := res.State.Call(e.Call)
		if !ok || c.Status != agent.Pending || c.Attempts != e.Round {
			continue
		}
		decided, err := s.claimSet(ctx, e.Thread, claimKey(*c))
		if err != nil {
			return nil, err
		}
		if decided {
			continue
		}
		g, err := s.Gate(ctx, e.Thread, &res.State, *c) // reads storage for a quorum only
		if err != nil {
			return nil, err
		}
		if user != "" && c.Quorum() > 1 && g != nil && g.Approved(user) {
			// A call that needs several approvals no longer waits for
			// someone who has approved it.
			continue
		}
		out = append(out, Waiting{InboxEntry: e, AgentCall: *c, Gate: g})
	}
	return out, nil
}

// forgetInbox drops the entries of a thread that no longer exists.
func (s *Service) forgetInbox(ctx context.Context, thread string) {
	if err := s.store.UpdateInbox(ctx, &InboxUpdate{Thread: thread}); err != nil {
		s.log.WithField("thread", thread).WithError(err).Warn("dropping a deleted thread from the inbox")
	}
}

// WaitsFor reports whether the call of e waits for user: user is one of
// its approvers, or in one of its approver user groups (Options.Groups),
// or — when the rule names no approvers — a member of the call's channel
// (Options.Members; without it, nobody is); and never the person who
// asked for it when the rule does not allow self-approval. It judges by
// the rule the call was made under; a decision is judged by Decide, under
// the rule in force. Group and channel members may come from memory
// (RememberedGroups, RememberedMembers): a decision asks again.
func (s *Service) WaitsFor(ctx context.Context, e InboxEntry, user string) (bool, error) {
	if user == "" || (!e.SelfApproval && user == e.Requester) {
		return false, nil
	}
	if len(e.Approvers) == 0 {
		if s.opts.Members == nil || e.Channel == "" {
			return false, nil
		}
		if r, ok := s.opts.Members.(RememberedMembers); ok {
			return r.InChannelRemembered(ctx, e.Channel, user)
		}
		return s.opts.Members.InChannel(ctx, e.Channel, user)
	}
	rule := tools.Rule{Approvers: e.Approvers, SelfApproval: e.SelfApproval}
	ok, _, err := rule.MayApprove(user, e.Requester, s.inGroupShown(ctx))
	if err != nil || ok {
		return ok, err
	}
	// Once the call was escalated, it waits for those it was escalated
	// to as well (as Decide lets them decide it).
	current, known := s.agent.Rule(e.Tool)
	if !known || len(current.EscalateTo) == 0 {
		return false, nil
	}
	escalated, err := s.claimSet(ctx, e.Thread, escalationKey(agent.Call{Key: e.Call, Attempts: e.Round}))
	if err != nil || !escalated {
		return false, err
	}
	rule.Approvers = append(slices.Clone(rule.Approvers), current.EscalateTo...)
	ok, _, err = rule.MayApprove(user, e.Requester, s.inGroupShown(ctx))
	return ok, err
}

// RecentDecisions returns up to n of user's latest decisions, newest
// first.
func (s *Service) RecentDecisions(ctx context.Context, user string, n int) ([]DecisionRecord, error) {
	if !s.opts.Inbox || user == "" {
		return nil, nil
	}
	recs, err := s.store.RecentDecisions(ctx, user, n)
	if err != nil {
		return nil, fmt.Errorf("recent decisions of %s: %w", user, err)
	}
	// A decision recorded twice (a session's end retried) is shown once.
	out := recs[:0]
	seen := map[string]bool{}
	for _, r := range recs {
		k := fmt.Sprintf("%s\x00%s\x00%d\x00%s", r.Thread, r.Call, r.Round, r.Kind)
		if !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	return out, nil
}

// inboxEntries are the index entries of the calls that wait at res.
func (s *Service) inboxEntries(res *graph.Result[agent.State]) []InboxEntry {
	if res == nil || res.Status() != graph.Paused {
		return nil
	}
	st := &res.State
	var out []InboxEntry
	for c := range st.AllWaiting() {
		if c.Status != agent.Pending {
			continue
		}
		e := InboxEntry{Thread: res.Checkpoint.Thread, Call: c.Key, Round: c.Attempts, Tool: c.Tool,
			Requester: c.AskedBy(st), Team: st.Team, Channel: st.Channel, Since: c.Since, Expires: c.Expires}
		if rule, ok := s.agent.Rule(c.Tool); ok {
			e.Approvers, e.SelfApproval = slices.Clone(rule.Approvers), rule.SelfApproval
		}
		out = append(out, e)
	}
	return out
}

// decisionRecord is the record of decision d, applied to call c of st.
func decisionRecord(thread string, st *agent.State, c agent.Call, d agent.Decision) DecisionRecord {
	reason := d.Reason
	if r := []rune(reason); len(r) > RecentReasonLen {
		reason = string(r[:RecentReasonLen-1]) + "…"
	}
	return DecisionRecord{Thread: thread, Call: c.Key, Round: c.Attempts, Tool: c.Tool, Team: st.Team, Channel: st.Channel,
		By: d.By, Kind: d.Kind, At: d.At, Reason: reason}
}

// inboxUpdate is what the session ss changes in the index, or nil.
func (s *Service) inboxUpdate(ss *session) *InboxUpdate {
	if !s.opts.Inbox || ss.inbox == nil {
		return nil
	}
	return &InboxUpdate{Thread: ss.thread, Waiting: s.inboxEntries(ss.inbox), Decided: ss.decided}
}

// inboxChanged tells the front end what u changed in the index, if
// anything.
func (s *Service) inboxChanged(u *InboxUpdate) {
	if u == nil {
		return
	}
	var ch InboxChange
	for _, e := range u.Waiting {
		if !slices.ContainsFunc(u.Replaced, e.same) {
			ch.Added = append(ch.Added, e)
		}
	}
	for _, e := range u.Replaced {
		if !slices.ContainsFunc(u.Waiting, e.same) {
			ch.Removed = append(ch.Removed, e)
		}
	}
	ch.Decided, ch.Watchers = u.Decided, u.Watchers
	if len(ch.Added) == 0 && len(ch.Removed) == 0 && len(ch.Decided) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), inboxReportTimeout)
	defer cancel()
	_ = s.report(ctx, Event{Kind: InboxChanged, Thread: u.Thread, Inbox: &ch})
}

// inboxReportTimeout bounds what a front end does when the index changes
// (publishing people's inboxes).
const inboxReportTimeout = 30 * time.Second
