package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/interrupt"
	"github.com/countersign/countersign/tools"
)

// Decision is a person's decision on one call, as a front end received
// it: a click on a card, a submitted form, an answer at a prompt. Decide
// is the only way to record one, and it owns every rule about it.
type Decision struct {
	// Thread and Call name the call; Round is its decision round as the
	// card showed it (the call's Attempts then), so that a card of an
	// earlier round cannot decide a later one.
	Thread string
	Call   string
	Round  int
	// Hash is the arguments' hash the card showed (tools.ArgsHash), if
	// the front end shows one: a decision on other arguments than the
	// call has is refused.
	Hash string
	// Team and Channel are where the person acted; they must be the
	// thread's.
	Team, Channel string
	// FromInbox says the person acted outside the thread's channel, in
	// an inbox that lists the calls waiting for them (Slack's Home tab):
	// Channel is then not checked, and a call whose rule names no
	// approvers — anyone in its channel may decide it — may be decided
	// only by a member of that channel (Options.Members).
	FromInbox bool
	// By is who decided.
	By string
	// Kind is Approve, Edit or Reject on a pending call; Approve (retry),
	// MarkDone or Reject (skip) on a call whose outcome is unknown.
	Kind interrupt.Kind
	// Args are an Edit's new arguments; Reason a Reject's reason.
	Args   json.RawMessage
	Reason string
}

// Errors of deciding. Front ends match them and tell the person; nothing
// changed.
var (
	// ErrNotPending: the call does not wait for this decision — unknown,
	// settled, of another round, or shown with other arguments.
	ErrNotPending = errors.New("this request is no longer pending")
	// ErrNoThread: the thread has no conversation.
	ErrNoThread = errors.New("no conversation in this thread")
	// ErrThreadExists: Start was asked of a thread that has one already
	// (a retried delivery).
	ErrThreadExists = errors.New("the thread has a conversation already")
)

// RefusedError says why a person may not make a decision. Its words name
// people and channels by ID, never in the markup of a front end: Why says
// it all for logs and the audit trail, and Parts say it in pieces that
// each front end renders for its medium (Render). The refusal is audited.
type RefusedError struct {
	// Why is the reason in words, people and channels named neutrally
	// ("user U1", "channel C1"): fit for logs, never shown with markup.
	Why string
	// Parts are Why in pieces, when it names people or a channel.
	Parts []Part
	// TryAgain is set when the rule could not be checked (a lookup
	// failed): nothing was decided, and the same request may succeed
	// later. It is never an answer about the person.
	TryAgain bool
	// Noted is set on a thread reply that decided nothing: the reply was
	// kept as a note for the model.
	Noted bool
	// Changed is set when the bot was updated and no longer offers the
	// call's tool: Drive shows the thread what changed, with its choices.
	Changed bool
}

// Part is a piece of a refusal: text as it is (a front end escapes it for
// its medium), or people (user and user-group IDs, as a list), or a
// channel ID.
type Part struct {
	Text    string
	People  []string
	Channel string
}

// refused returns a refusal made of parts, with its Why.
func refused(parts ...Part) *RefusedError {
	var b strings.Builder
	for _, p := range parts {
		switch {
		case p.People != nil:
			b.WriteString(tools.NameIDs(p.People))
		case p.Channel != "":
			b.WriteString("channel " + p.Channel)
		default:
			b.WriteString(p.Text)
		}
	}
	e := &RefusedError{Why: b.String()}
	if len(parts) > 1 {
		e.Parts = parts
	}
	return e
}

// refusedText is a refusal that names nobody.
func refusedText(why string) *RefusedError { return &RefusedError{Why: why} }

// tryAgain is the refusal of a request whose rule could not be checked.
func tryAgain(why string) *RefusedError { return &RefusedError{Why: why, TryAgain: true} }

func (e *RefusedError) Error() string { return "refused: " + e.Why }

// Render says why in the words of a front end: text escapes text for its
// medium, people renders a list of user and user-group IDs, channel a
// channel ID (Slack mentions in Slack, names in a terminal).
func (e *RefusedError) Render(text func(string) string, people func([]string) string, channel func(string) string) string {
	if len(e.Parts) == 0 {
		return text(e.Why)
	}
	var b strings.Builder
	for _, p := range e.Parts {
		switch {
		case p.People != nil:
			b.WriteString(people(p.People))
		case p.Channel != "":
			b.WriteString(channel(p.Channel))
		default:
			b.WriteString(text(p.Text))
		}
	}
	return b.String()
}

// InvalidArgsError is an Edit whose arguments the tool does not take.
type InvalidArgsError struct{ Err error }

func (e *InvalidArgsError) Error() string { return "invalid arguments: " + e.Err.Error() }
func (e *InvalidArgsError) Unwrap() error { return e.Err }

// Groups tells whether a user belongs to a user group, for approver lists
// that name groups (Slack's S… IDs). It must be safe for concurrent use.
type Groups interface {
	InGroup(ctx context.Context, group, user string) (bool, error)
}

// Decide records d, if it may be made: the call must wait for a decision
// in d's round, with the arguments d was shown; d must come from the
// thread's own channel; the tool's rule must let d.By decide (approvers,
// user groups, self_approval — the person who asked for the turn may
// always reject their own request); an edit's arguments must be
// unambiguous JSON that fits the tool's schema and policy. The decision
// is then claimed atomically, bound to the hash of the arguments it
// approves, and audited.
//
// It loads the thread once and shows nothing to anyone, so a front end
// can call it before acknowledging a click; Drive (typically in the
// background) applies the decision and runs on. Refusals are audited.
// Errors: ErrNotPending, *RefusedError, *InvalidArgsError,
// *AlreadyDecidedError (someone decided first), or a storage error.
// Several processes may call Decide on one call at once: one wins.
//
// The thread's lease: when the store offers Sessions and nobody holds the
// lease, the claim takes it in the same round trip, for the caller's
// Drive, and Decide parks that session in the service (without renewing
// the lease) instead of releasing it. The caller must then call Drive on
// the thread, in this process, soon — within half of Options.LeaseTTL it
// uses the parked session, after that it lets it go and takes the lease
// anew. A Drive that never comes stalls the thread until the lease lapses
// (Options.LeaseTTL, 10s by default): no other process can run it
// meanwhile; the claim also wrote a wake-up a lease away, so the
// schedule's Tick then applies the decision. Only a nil error can leave a
// session parked (a lease a claim took before a later step failed is not
// parked, and lapses); Check never takes the lease.
func (s *Service) Decide(ctx context.Context, d Decision) error {
	// The state this process last saw is checked first, without a load;
	// the claim then checks, in the same step, that it is still the
	// thread's latest. Otherwise the stored state is checked.
	if cached, ok := s.graph.Cached(d.Thread); ok {
		_, c, id, err := s.checkAt(ctx, d, cached, false, false)
		if err == nil {
			err = s.decideClaim(ctx, d.Thread, *c, id, cached.Checkpoint.ID)
			if !errors.Is(err, ErrStale) {
				return s.approvedAgain(ctx, d, c, err)
			}
		}
	}
	_, c, id, err := s.check(ctx, d, false)
	if err != nil {
		return err
	}
	return s.approvedAgain(ctx, d, c, s.decideClaim(ctx, d.Thread, *c, id, ""))
}

// approvedAgain turns the error of an approval its author had given
// already into a refusal that says so (audited).
func (s *Service) approvedAgain(ctx context.Context, d Decision, c *agent.Call, err error) error {
	var again *alreadyApprovedError
	if errors.As(err, &again) {
		return s.refuse(ctx, d, c, refusedText(again.why()))
	}
	return err
}

// Check answers whether Decide(d) would be accepted now, without
// recording anything — for a front end that opens a form first — and
// returns the call. A refusal is audited.
func (s *Service) Check(ctx context.Context, d Decision) (*agent.Call, error) {
	_, c, _, err := s.check(ctx, d, true)
	return c, err
}

// check applies every rule of Decide and returns the decision to claim.
// A dry check of an Edit without arguments checks the call's own.
func (s *Service) check(ctx context.Context, d Decision, dry bool) (*agent.State, *agent.Call, interrupt.Decision, error) {
	res, err := s.graph.State(ctx, d.Thread)
	if errors.Is(err, graph.ErrNoCheckpoint) {
		return nil, nil, interrupt.Decision{}, ErrNotPending
	}
	if err != nil {
		return nil, nil, interrupt.Decision{}, err
	}
	return s.checkAt(ctx, d, res, dry, true)
}

// checkAt is check against the thread at res; a refusal is audited only
// if audit is set.
func (s *Service) checkAt(ctx context.Context, d Decision, res *graph.Result[agent.State], dry, audit bool) (*agent.State, *agent.Call, interrupt.Decision, error) {
	id := interrupt.Decision{Kind: d.Kind, By: d.By, At: s.opts.Now(), Reason: d.Reason}
	refuse := s.refuse
	if !audit {
		refuse = func(context.Context, Decision, *agent.Call, *RefusedError) error { return errors.New("refused") }
	}
	st := &res.State
	c, ok := st.Call(d.Call)
	switch {
	case !ok:
		// Settled and handed to the model since: the claim says who.
		return st, nil, id, s.decidedRound(ctx, d)
	case c.Attempts != d.Round || !c.Status.Waiting():
		// Whether the winner's decision is still being applied or the
		// call has run since, the loser hears who decided that round.
		return st, c, id, s.decidedRound(ctx, d)
	case d.Hash != "" && d.Hash != c.RunHash():
		return st, c, id, ErrNotPending
	}
	if _, offered := s.agent.Rule(c.Tool); !offered {
		r := refusedText("the bot was updated and no longer offers " + c.Tool + "; the thread says what changed")
		r.Changed = true
		return st, c, id, s.refuse(ctx, d, c, r)
	}
	if r := s.refusal(ctx, st, c, d); r != nil {
		return st, c, id, refuse(ctx, d, c, r)
	}
	switch d.Kind {
	case interrupt.Approve:
		id.Hash = c.RunHash()
	case interrupt.Edit:
		if d.Args == nil && dry {
			d.Args = c.RunArgs() // a form is about to open with them
		}
		args, err := tools.Canonical(d.Args)
		if err == nil {
			err = s.agent.ValidateArgs(c.Tool, args)
		}
		if err != nil {
			return st, c, id, &InvalidArgsError{Err: err}
		}
		id.Args, id.Hash = args, tools.ArgsHash(c.Tool, args)
		if c.Quorum() > 1 && id.Hash == c.RunHash() && !dry {
			// An "edit" that changes nothing, of a call that needs
			// several approvals, approves the arguments as they are.
			id.Kind, id.Args = interrupt.Approve, nil
		}
	}
	if err := s.agent.CheckDecision(st, c.Key, id); err != nil {
		return st, c, id, refuse(ctx, d, c, refusedText(fmt.Sprintf("%s does not apply to a call that is %s", d.Kind, c.Status)))
	}
	return st, c, id, nil
}

// refuse audits a refused decision and returns the refusal.
func (s *Service) refuse(ctx context.Context, d Decision, c *agent.Call, r *RefusedError) error {
	s.audit(ctx, d.Thread, *c, map[string]string{"decision": "refused", "attempted": d.Kind.String(), "by": d.By, "reason": r.Why})
	s.log.WithFields(logrus.Fields{"thread": d.Thread, "call": c.Key, "by": d.By, "attempted": d.Kind.String()}).Info("decision refused")
	return r
}

// decidedRound returns an *AlreadyDecidedError naming the decision
// claimed on d's call in d's round, or ErrNotPending if there is none.
func (s *Service) decidedRound(ctx context.Context, d Decision) error {
	all, err := s.store.Claims(ctx, d.Thread)
	if err != nil {
		return err
	}
	// The round's last revision says how it ended.
	raw, ok := all[claimKey(agent.Call{Key: d.Call, Attempts: d.Round})]
	for rev := 1; ; rev++ {
		next, more := all[claimKey(agent.Call{Key: d.Call, Attempts: d.Round, Revision: rev})]
		if !more {
			break
		}
		raw, ok = next, true
	}
	if !ok {
		return ErrNotPending
	}
	first, err := decodeClaim(raw)
	if err != nil {
		return ErrNotPending
	}
	return &AlreadyDecidedError{Key: d.Call, Decision: first}
}

// refusal says why d.By may not make decision d on c, or nil if they may.
func (s *Service) refusal(ctx context.Context, st *agent.State, c *agent.Call, d Decision) *RefusedError {
	if st.Team != "" && d.Team != st.Team {
		if d.FromInbox {
			return refusedText("this call belongs to another workspace")
		}
		return refusedText("this card belongs to another channel")
	}
	// A decision from an inbox comes from outside any channel; who may
	// make it is checked below (memberRefusal).
	if !d.FromInbox {
		if why := s.channelRefusal(ctx, st, c, d.Thread, d.Channel); why != "" {
			return refusedText(why)
		}
	}
	if d.By == "" || strings.ContainsAny(d.By, "\t\n\r") {
		return refusedText("the person deciding is unknown")
	}
	switch d.Kind {
	case interrupt.Approve, interrupt.Edit, interrupt.Reject, interrupt.MarkDone:
	default:
		return refusedText(fmt.Sprintf("a person cannot %s a call", d.Kind))
	}
	if rule, ok := s.agent.Rule(c.Tool); ok {
		if why := notOffered(rule, c, d.Kind, d.By == c.AskedBy(st)); why != "" {
			return refusedText(why)
		}
	}
	if d.Kind == interrupt.Reject && d.By == c.AskedBy(st) {
		return nil // withdrawing one's own request is always allowed
	}
	if r := s.mayDecide(ctx, d.Thread, st, c, d.By); r != nil {
		return r
	}
	// A decision made outside the call's channel — from an inbox, or on
	// a copy of the card in a notify channel or a direct message — counts
	// as one made on the card: when anyone in the channel may decide, only
	// a member of the channel may.
	if d.FromInbox || d.Channel != st.Channel {
		return s.memberRefusal(ctx, st, c, d.By)
	}
	return nil
}

// memberRefusal says why by may not decide c from outside its channel
// (an inbox, a copy of its card) when its rule lets anyone in the channel
// decide; or nil. A failed membership check is a "try again", never an
// answer.
func (s *Service) memberRefusal(ctx context.Context, st *agent.State, c *agent.Call, by string) *RefusedError {
	if rule, ok := s.agent.Rule(c.Tool); !ok || len(rule.Approvers) > 0 {
		return nil
	}
	where := Part{Text: "its channel"}
	if st.Channel != "" {
		where = Part{Channel: st.Channel}
	}
	if s.opts.Members == nil {
		return refused(Part{Text: "anyone in "}, where, Part{Text: " may decide this call, so decide it there"})
	}
	in, err := s.opts.Members.InChannel(ctx, st.Channel, by)
	if err != nil {
		s.log.WithFields(logrus.Fields{"thread": st.Thread, "call": c.Key}).WithError(err).Warn("checking channel membership")
		r := refused(Part{Text: "I couldn't check whether you are in "}, where, Part{Text: "; please try again"})
		r.TryAgain = true
		return r
	}
	if !in {
		return refused(Part{Text: "only members of "}, where, Part{Text: " may decide this call"})
	}
	return nil
}

// mayDecide says why by may not decide c, a call of thread, under its
// tool's rule (and its escalation, once escalated), or nil.
func (s *Service) mayDecide(ctx context.Context, thread string, st *agent.State, c *agent.Call, by string) *RefusedError {
	rule, ok := s.agent.Rule(c.Tool)
	if !ok {
		return refusedText("the tool " + c.Tool + " is no longer offered")
	}
	ok, denial, err := rule.MayApprove(by, c.AskedBy(st), s.inGroup(ctx))
	if err == nil && !ok && len(rule.EscalateTo) > 0 && len(rule.Approvers) > 0 {
		// Once the call was escalated, the people it was escalated to
		// are among its approvers.
		var escalated bool
		if escalated, err = s.claimSet(ctx, thread, escalationKey(*c)); err == nil && escalated {
			rule.Approvers = append(slices.Clone(rule.Approvers), rule.EscalateTo...)
			ok, denial, err = rule.MayApprove(by, c.AskedBy(st), s.inGroup(ctx))
		}
	}
	if err != nil {
		s.log.WithFields(logrus.Fields{"thread": st.Thread, "call": c.Key}).WithError(err).Warn("checking who may decide")
		return tryAgain("I couldn't check whether you may decide this call; please try again")
	}
	if !ok {
		return denied(denial)
	}
	return nil
}

// denied is the refusal of a tools.Denial.
func denied(d tools.Denial) *RefusedError {
	if len(d.Approvers) == 0 {
		return refusedText(d.Why)
	}
	return refused(Part{Text: "only "}, Part{People: d.Approvers}, Part{Text: " may approve this call"})
}

func (s *Service) inGroup(ctx context.Context) func(group, user string) (bool, error) {
	if s.opts.Groups == nil {
		return nil
	}
	return func(group, user string) (bool, error) { return s.opts.Groups.InGroup(ctx, group, user) }
}

// Message is a person's message in a conversation's thread.
type Message struct {
	Thread        string
	Team, Channel string
	By            string
	Text          string
}

// Reply handles a person's message in the thread. While calls wait for a
// decision, it is feedback: each pending call its author may decide is
// rejected with the text as the reason, and the run goes on. If they may
// decide none of them, nothing is rejected: the text is kept as a note
// for the model's next turn and Reply returns a *RefusedError with Noted
// set. Calls whose outcome is unknown are settled only by their buttons.
// After a run has finished the message is a new turn, whose calls the
// author asked for. It returns ErrBusy while a run is working and
// ErrFailed if the last run failed.
func (s *Service) Reply(ctx context.Context, m Message) error {
	// The state this process last saw says which way to go; a new turn
	// checks it again (Continue's compare-and-set), and a stale guess is
	// retried with the stored state.
	if cached, ok := s.graph.Cached(m.Thread); ok && cached.Status() == graph.Done {
		if err := s.reply(ctx, m, cached); !errors.Is(err, errStaleGuess) {
			return err
		}
	}
	res, err := s.graph.State(ctx, m.Thread)
	if errors.Is(err, graph.ErrNoCheckpoint) {
		return s.replyToStarting(ctx, m)
	}
	if err != nil {
		return err
	}
	err = s.reply(ctx, m, res)
	if errors.Is(err, errStaleGuess) {
		return fmt.Errorf("reply to %s: %w", m.Thread, ErrBusy)
	}
	return err
}

// replyToStarting answers a reply in a thread that has no checkpoint. A
// conversation's first checkpoint is written with its first pause or
// answer, after the answer is shown: a reply typed right after it can
// find none yet. The run that starts a conversation holds the thread's
// lease, so the reply waits for the lease (as a reply to an answered run
// does), and then looks again: only a thread that still has none is not a
// conversation.
func (s *Service) replyToStarting(ctx context.Context, m Message) error {
	err := s.withLeaseWithin(ctx, m.Thread, s.opts.LeaseTTL+s.opts.BusyWait, func(ctx context.Context, _ *session) error {
		_, err := s.graph.State(ctx, m.Thread)
		if errors.Is(err, graph.ErrNoCheckpoint) {
			return fmt.Errorf("reply to %s: %w", m.Thread, ErrNoThread)
		}
		if err != nil {
			return err
		}
		return errStarted
	})
	if !errors.Is(err, errStarted) {
		return err
	}
	res, err := s.graph.State(ctx, m.Thread)
	if err != nil {
		return err
	}
	err = s.reply(ctx, m, res)
	if errors.Is(err, errStaleGuess) {
		return fmt.Errorf("reply to %s: %w", m.Thread, ErrBusy)
	}
	return err
}

// errStarted: the thread has a checkpoint after all.
var errStarted = errors.New("the conversation has started")

// errStaleGuess: the run was not done after all.
var errStaleGuess = errors.New("the run is not done")

func (s *Service) reply(ctx context.Context, m Message, res *graph.Result[agent.State]) error {
	switch res.Status() {
	case graph.Paused:
		return s.feedback(ctx, m, res)
	case graph.Done:
		// The run answered: whoever holds the lease is only showing the
		// answer and letting go, or died and loses it within a lease.
		// Wait for it rather than call a new turn's reply busy.
		return s.withLeaseWithin(ctx, m.Thread, s.opts.LeaseTTL+s.opts.BusyWait, func(ctx context.Context, ss *session) error {
			run := s.begin(m.Thread, "continue").WithField("requester", m.By)
			res, err := s.graph.Continue(ctx, m.Thread, agent.UserTurn(m.By, m.Text))
			if errors.Is(err, graph.ErrNotDone) {
				return errStaleGuess
			}
			s.after(ctx, run, ss, res, err)
			return nil
		})
	case graph.Failed:
		return fmt.Errorf("reply to %s: %w", m.Thread, ErrFailed)
	default:
		return fmt.Errorf("reply to %s: %w", m.Thread, ErrBusy)
	}
}

// feedback applies a reply to a paused run.
func (s *Service) feedback(ctx context.Context, m Message, res *graph.Result[agent.State]) error {
	d := interrupt.Decision{Kind: interrupt.Respond, By: m.By, At: s.opts.Now(), Reason: m.Text}
	st := &res.State
	rejected, why := 0, (*RefusedError)(nil)
	for _, c := range st.Waiting() {
		if c.Status != agent.Pending {
			why = refusedText("a call whose outcome is unknown is settled with its buttons")
			continue
		}
		if m.By != c.AskedBy(st) {
			if rule, ok := s.agent.Rule(c.Tool); ok {
				if w := notOffered(rule, &c, interrupt.Reject, false); w != "" {
					why = refusedText(w)
					continue
				}
			}
			if w := s.mayDecide(ctx, m.Thread, st, &c, m.By); w != nil {
				why = w
				continue
			}
		}
		err := s.claim(ctx, m.Thread, c, d, "")
		var lost *AlreadyDecidedError
		if errors.As(err, &lost) {
			continue
		}
		if err != nil {
			return err
		}
		rejected++
	}
	if rejected > 0 {
		return s.Drive(ctx, m.Thread)
	}
	if why == nil {
		why = refusedText("the calls were decided already")
	}
	note := agent.Note{By: m.By, Text: m.Text, At: d.At}
	err := s.withLease(ctx, m.Thread, func(ctx context.Context, ss *session) error {
		cur, err := s.graph.State(ctx, m.Thread)
		if err != nil {
			return err
		}
		if cur.Status() != graph.Paused {
			return fmt.Errorf("note in %s: %w", m.Thread, ErrBusy)
		}
		run := s.begin(m.Thread, "note")
		out, err := s.graph.ResumeAt(ctx, m.Thread, cur.Checkpoint.ID, agent.AddNote(note))
		s.after(ctx, run, ss, out, err)
		return nil
	})
	if err != nil {
		return err
	}
	s.audit(ctx, m.Thread, agent.Call{}, map[string]string{"decision": "noted", "by": m.By, "reason": why.Why})
	why.Noted = true
	return why
}

// Retry resumes a failed run from the step that failed. by must be the
// person who asked for the turn, or someone the policy lets decide the
// run's calls (for a run with none waiting: any offered tool's).
func (s *Service) Retry(ctx context.Context, m Message) error {
	res, err := s.graph.State(ctx, m.Thread)
	if errors.Is(err, graph.ErrNoCheckpoint) {
		return ErrNotPending
	}
	if err != nil {
		return err
	}
	if res.Status() != graph.Failed {
		return fmt.Errorf("retry %s: %w (status %s)", m.Thread, ErrNotFailed, res.Status())
	}
	st := &res.State
	if m.Channel != st.Channel || (st.Team != "" && m.Team != st.Team) {
		return refusedText("this card belongs to another channel")
	}
	if r := s.mayRetry(ctx, m.Thread, st, m.By); r != nil {
		s.audit(ctx, m.Thread, agent.Call{}, map[string]string{"decision": "refused", "attempted": "retry_run", "by": m.By, "reason": r.Why})
		return r
	}
	return s.withLease(ctx, m.Thread, func(ctx context.Context, ss *session) error {
		res, err := s.graph.State(ctx, m.Thread)
		if err != nil {
			return err
		}
		if res.Status() != graph.Failed {
			return fmt.Errorf("retry %s: %w (status %s)", m.Thread, ErrNotFailed, res.Status())
		}
		s.audit(ctx, m.Thread, agent.Call{}, map[string]string{"decision": "retry_run", "by": m.By, "at": s.opts.Now().UTC().Format(time.RFC3339Nano)})
		run := s.begin(m.Thread, "retry").WithField("by", m.By)
		out, err := s.graph.Resume(ctx, m.Thread, nil)
		s.auditCutOff(ctx, res, out)
		s.after(ctx, run, ss, out, err)
		return nil
	})
}

// mayRetry says why by may not retry the failed run of st, or nil.
func (s *Service) mayRetry(ctx context.Context, thread string, st *agent.State, by string) *RefusedError {
	if by != "" && by == turnBy(st) {
		return nil
	}
	calls := st.Calls
	if len(calls) == 0 {
		for _, t := range s.agent.Tools() {
			calls = append(calls, agent.Call{Tool: t.Name()})
		}
	}
	gated := 0
	for i := range calls {
		if rule, ok := s.agent.Rule(calls[i].Tool); !ok || !rule.NeedsApproval() {
			continue
		}
		gated++
		r := s.mayDecide(ctx, thread, st, &calls[i], by)
		if r == nil {
			return nil
		}
		if r.TryAgain {
			return r
		}
	}
	if gated == 0 {
		return nil
	}
	return refusedText("only the person who asked, or someone who may approve its calls, may retry this run")
}

// turnBy is who asked for the thread's latest turn.
func turnBy(st *agent.State) string {
	if st.TurnBy != "" {
		return st.TurnBy
	}
	return st.Requester
}
