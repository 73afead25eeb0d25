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
	"github.com/countersign/countersign/llm"
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
	Kind agent.Kind
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
	// ErrKept: the reply came before its conversation's first save and
	// is kept for it; the KeptCarrier gives it back once the save is
	// made (starting.go).
	ErrKept = errors.New("the reply is kept until the conversation's first save")
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
	// stateful: the refusal is about the call's state as it was read,
	// which a more recent state may not share.
	stateful bool
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
// InGroup is the check that lets a person decide: it must not answer
// from a memory that a known change made out of date.
type Groups interface {
	InGroup(ctx context.Context, group, user string) (bool, error)
}

// RememberedGroups is a Groups that can also answer from memory, however
// old within its bounds, more cheaply: for what only shows whom a call
// waits for (WaitsFor: an inbox), never for a decision.
type RememberedGroups interface {
	InGroupRemembered(ctx context.Context, group, user string) (bool, error)
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
// Every rule is checked once per decision: an edit's arguments are
// canonicalised, validated and hashed once, and the claim carries them
// with their hash (a checked claim, which the agent applies without
// checking them again). A refusal is audited once, here; a check that
// could not be made (a lookup failed: RefusedError.TryAgain) is logged,
// never audited as an answer.
//
// It loads the thread once and shows nothing to anyone, so a front end
// can call it before acknowledging a click; Drive (typically in the
// background) applies the decision and runs on.
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
	c, err := s.decide(ctx, d)
	return s.auditRefusal(ctx, d, c, err)
}

// decide is Decide without the audit of a refusal; it returns the call
// decided, if it was found.
func (s *Service) decide(ctx context.Context, d Decision) (*agent.Call, error) {
	// The state this process last saw is checked first, without a load;
	// the claim then checks, in the same step, that it is still the
	// thread's latest. A refusal by the rules stands (they do not depend
	// on how recent the state is); anything else is checked again
	// against the stored state.
	if cached, ok := s.graph.Cached(d.Thread); ok {
		ck, err := s.checkAt(ctx, d, cached, false)
		if err == nil {
			err = s.decideClaim(ctx, d.Thread, *ck.call, ck.claim, cached.Checkpoint.ID)
			if !errors.Is(err, ErrStale) {
				return ck.call, approvedAgain(err)
			}
		} else if final(err) {
			return ck.call, err
		}
	}
	ck, err := s.check(ctx, d, false)
	if err != nil {
		return ck.call, err
	}
	return ck.call, approvedAgain(s.decideClaim(ctx, d.Thread, *ck.call, ck.claim, ""))
}

// final reports whether a check's error on the state this process last
// saw holds whatever the stored state is: a refusal by the rules, or
// arguments the tool does not take.
func final(err error) bool {
	var r *RefusedError
	var invalid *InvalidArgsError
	return (errors.As(err, &r) && !r.stateful) || errors.As(err, &invalid)
}

// approvedAgain turns the error of an approval its author had given
// already into a refusal that says so.
func approvedAgain(err error) error {
	var again *alreadyApprovedError
	if errors.As(err, &again) {
		return refusedText(again.why())
	}
	return err
}

// Check answers whether Decide(d) would be accepted now, without
// recording anything — for a front end that opens a form first — and
// returns the call. A refusal is audited.
func (s *Service) Check(ctx context.Context, d Decision) (*agent.Call, error) {
	ck, err := s.check(ctx, d, true)
	return ck.call, s.auditRefusal(ctx, d, ck.call, err)
}

// checked is a decision that every rule allows (its tool's rule is looked
// up once and handed to each check): the claim to record — for an edit,
// its canonical arguments and their hash — and the call it decides. On an
// error, call is the call found, if any.
type checked struct {
	claim agent.Decision
	call  *agent.Call
}

// check applies every rule of Decide to the stored state and returns the
// decision to claim. A dry check of an Edit without arguments checks the
// call's own.
func (s *Service) check(ctx context.Context, d Decision, dry bool) (checked, error) {
	res, err := s.graph.State(ctx, d.Thread)
	if errors.Is(err, graph.ErrNoCheckpoint) {
		return checked{}, ErrNotPending
	}
	if err != nil {
		return checked{}, err
	}
	return s.checkAt(ctx, d, res, dry)
}

// checkAt is check against the thread at res. It records nothing: a
// refusal is returned, for Decide to audit.
func (s *Service) checkAt(ctx context.Context, d Decision, res *graph.Result[agent.State], dry bool) (checked, error) {
	ck := checked{claim: agent.Decision{Kind: d.Kind, By: d.By, At: s.opts.Now(), Reason: d.Reason}}
	st := &res.State
	c, ok := st.Call(d.Call)
	ck.call = c
	switch {
	case !ok:
		// Settled and handed to the model since: the claim says who.
		return ck, s.decidedRound(ctx, d)
	case c.Attempts != d.Round || !c.Status.Waiting():
		// Whether the winner's decision is still being applied or the
		// call has run since, the loser hears who decided that round.
		return ck, s.decidedRound(ctx, d)
	case d.Hash != "" && d.Hash != c.RunHash():
		return ck, ErrNotPending
	}
	rule, offered := s.agent.Rule(c.Tool)
	if !offered {
		var r *RefusedError
		if rule, r = ruleOfGone(c, d); r != nil {
			return ck, r
		}
	}
	if r := s.refusal(ctx, st, c, rule, d); r != nil {
		return ck, r
	}
	switch d.Kind {
	case agent.Approve:
		ck.claim.Hash = c.RunHash()
	case agent.Edit:
		if d.Args == nil && dry {
			d.Args = c.RunArgs() // a form is about to open with them
		}
		args, err := tools.Canonical(d.Args)
		if err == nil {
			err = s.agent.ValidateArgs(c.Tool, args)
		}
		if err != nil {
			return ck, &InvalidArgsError{Err: err}
		}
		ck.claim.Args, ck.claim.Hash = args, tools.ArgsHash(c.Tool, args)
		if c.Quorum() > 1 && ck.claim.Hash == c.RunHash() && !dry {
			// An "edit" that changes nothing, of a call that needs
			// several approvals, approves the arguments as they are.
			ck.claim.Kind, ck.claim.Args = agent.Approve, nil
		}
	}
	// The claim is checked: the agent trusts its arguments by their hash.
	if err := s.agent.CheckDecision(st, c.Key, ck.claim); err != nil {
		r := refusedText(fmt.Sprintf("%s does not apply to a call that is %s", d.Kind, c.Status))
		r.stateful = true
		return ck, r
	}
	return ck, nil
}

// auditRefusal audits a refusal that err may be, once, and returns err.
// A refusal whose rule could not be checked is not an answer about the
// person: it is logged, not audited.
func (s *Service) auditRefusal(ctx context.Context, d Decision, c *agent.Call, err error) error {
	var r *RefusedError
	if !errors.As(err, &r) {
		return err
	}
	call := agent.Call{Key: d.Call}
	if c != nil {
		call = *c
	}
	log := s.log.WithFields(logrus.Fields{"thread": d.Thread, "call": call.Key, "by": d.By, "attempted": d.Kind.String()})
	if r.TryAgain {
		log.Warn("a decision could not be checked; the person is asked to try again")
		return err
	}
	s.audit(ctx, d.Thread, call, map[string]string{"decision": "refused", "attempted": d.Kind.String(), "by": d.By, "reason": r.Why})
	log.Info("decision refused")
	return err
}

// decidedRound returns an *AlreadyDecidedError naming the decision
// claimed on d's call in d's round, or ErrNotPending if there is none.
func (s *Service) decidedRound(ctx context.Context, d Decision) error {
	// The round's last revision says how it ended. Its claims are read
	// by key, a batch of revisions at a time, not the thread's history.
	var raw []byte
	ok := false
	const batch = 8
	for from := 0; ; from += batch {
		keys := make([]string, batch)
		for i := range keys {
			keys[i] = claimKey(agent.Call{Key: d.Call, Attempts: d.Round, Revision: from + i})
		}
		got, err := s.store.ClaimValues(ctx, d.Thread, keys)
		if err != nil {
			return err
		}
		more := false
		for i, k := range keys {
			v, set := got[k]
			if !set && (from > 0 || i > 0) { // revision 0 may be unset
				break
			}
			if set {
				raw, ok = v, true
			}
			more = i == batch-1
		}
		if !more {
			break
		}
	}
	if !ok {
		return ErrNotPending
	}
	first, err := decodeClaim(raw)
	if err != nil {
		// A claim that cannot be read still says the round was
		// decided: the call does not wait for this decision.
		s.log.WithFields(logrus.Fields{"thread": d.Thread, "call": d.Call}).WithError(err).Warn("reading who decided a call")
		return ErrNotPending
	}
	return &AlreadyDecidedError{Key: d.Call, Decision: first}
}

// ruleOfGone is the rule that a decision on a call whose tool is not
// offered now is checked against, or why the decision is refused. A
// built-in tool the bot no longer offers: the bot was updated, and Drive
// shows the thread what changed, with its choices. An MCP server's tool
// that its server does not list now (it removed the tool, or has not
// connected since the bot started): the call cannot run, so it cannot be
// approved or edited; it can be rejected, by whom its card said could
// decide it when it began to wait (its CallRule), so that it does not
// wait on until it expires.
func ruleOfGone(c *agent.Call, d Decision) (tools.Rule, *RefusedError) {
	if !strings.Contains(c.Tool, tools.MCPToolSeparator) {
		r := refusedText("the bot was updated and no longer offers " + c.Tool + "; the thread says what changed")
		r.Changed = true
		return tools.Rule{}, r
	}
	gone := c.Tool + " is not offered by its MCP server now (the server no longer lists it, or has not connected since the bot started), so the call cannot run"
	switch {
	case c.Rule == nil:
		return tools.Rule{}, refusedText(gone)
	case d.Kind != agent.Reject:
		return tools.Rule{}, refusedText(gone + "; it can be rejected")
	}
	return tools.Rule{Approval: tools.ApprovalRequired, Approvers: c.Rule.Approvers, SelfApproval: c.Rule.SelfApproval}, nil
}

// refusal says why d.By may not make decision d on c, whose tool's rule
// is rule, or nil if they may.
func (s *Service) refusal(ctx context.Context, st *agent.State, c *agent.Call, rule tools.Rule, d Decision) *RefusedError {
	if st.Team != "" && d.Team != st.Team {
		if d.FromInbox {
			return refusedText("this call belongs to another workspace")
		}
		return refusedText("this card belongs to another channel")
	}
	// A decision from an inbox comes from outside any channel; who may
	// make it is checked below (memberRefusal).
	if !d.FromInbox {
		if r := s.channelRefusal(ctx, st, c, d.Thread, d.Channel); r != nil {
			return r
		}
	}
	if d.By == "" || strings.ContainsAny(d.By, "\t\n\r") {
		return refusedText("the person deciding is unknown")
	}
	switch d.Kind {
	case agent.Approve, agent.Edit, agent.Reject, agent.MarkDone:
	default:
		return refusedText(fmt.Sprintf("a person cannot %s a call", d.Kind))
	}
	if why := notOffered(rule, c, d.Kind, d.By == c.AskedBy(st)); why != "" {
		return refusedText(why)
	}
	if d.Kind == agent.Reject && d.By == c.AskedBy(st) {
		return nil // withdrawing one's own request is always allowed
	}
	if r := s.mayDecide(ctx, d.Thread, st, c, rule, d.By); r != nil {
		return r
	}
	// A decision made outside the call's channel — from an inbox, or on
	// a copy of the card in a notify channel or a direct message — counts
	// as one made on the card: when anyone in the channel may decide, only
	// a member of the channel may.
	if d.FromInbox || d.Channel != st.Channel {
		return s.memberRefusal(ctx, st, c, rule, d.By)
	}
	return nil
}

// memberRefusal says why by may not decide c from outside its channel
// (an inbox, a copy of its card) when its rule lets anyone in the channel
// decide; or nil. A failed membership check is a "try again", never an
// answer.
func (s *Service) memberRefusal(ctx context.Context, st *agent.State, c *agent.Call, rule tools.Rule, by string) *RefusedError {
	if len(rule.Approvers) > 0 {
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
func (s *Service) mayDecide(ctx context.Context, thread string, st *agent.State, c *agent.Call, rule tools.Rule, by string) *RefusedError {
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

// inGroup is the group check of a decision (Groups.InGroup).
func (s *Service) inGroup(ctx context.Context) func(group, user string) (bool, error) {
	if s.opts.Groups == nil {
		return nil
	}
	return func(group, user string) (bool, error) { return s.opts.Groups.InGroup(ctx, group, user) }
}

// inGroupShown is the group check of what only shows whom a call waits
// for: from memory when the lookup offers it (RememberedGroups).
func (s *Service) inGroupShown(ctx context.Context) func(group, user string) (bool, error) {
	if r, ok := s.opts.Groups.(RememberedGroups); ok {
		return func(group, user string) (bool, error) { return r.InGroupRemembered(ctx, group, user) }
	}
	return s.inGroup(ctx)
}

// Message is a person's message in a conversation's thread.
type Message struct {
	Thread        string
	Team, Channel string
	By            string
	Text          string
	// TS is the message's own time stamp, if the front end has one
	// (Slack's ts): it orders a reply kept while the conversation
	// started after the request that started it.
	TS string
	// Ref identifies the reply's request to the front end (for Slack:
	// its intake record). The runner keeps it with a kept reply and
	// gives it back to the front end's KeptCarrier; it is opaque here.
	Ref string
	// Kept says the reply was kept once while its conversation started
	// (Reply returned ErrKept) and is now carried on: finding the run
	// working, it waits as a reply to an answered run does.
	Kept bool
	// Images are the images the author attached, fetched and checked by
	// the front end (Text has a line for each). A new turn keeps them in
	// the conversation (agent.Agent.UserTurn); a reply to waiting calls
	// is read as text, and a kept reply keeps none (the front end gives
	// them again when it is carried on).
	Images []llm.Image
	// Expired says the reply was kept for its whole kept time
	// (KeptReplyTTL) while its conversation started, and is looked at a
	// last time: a thread still without a checkpoint is not a
	// conversation. Reply then takes it back from the kept replies,
	// rather than keep it again, and returns ErrNoThread, so that a first
	// save made after all does not hand over a reply whose front end
	// gave up on it; a thread found with a checkpoint gets it as any.
	Expired bool
}

// Reply handles a person's message in the thread. While calls wait for a
// decision, it is feedback: each pending call its author may decide is
// rejected with the text as the reason, and the run goes on. If they may
// decide none of them, nothing is rejected: the text is kept as a note
// for the model's next turn and Reply returns a *RefusedError with Noted
// set. Calls whose outcome is unknown are settled only by their buttons.
// After a run has finished the message is a new turn, whose calls the
// author asked for. It returns ErrBusy while a run is working and
// ErrFailed if the last run failed (a *FinalError if it failed in a way
// a retry cannot fix). A reply to a conversation whose
// first checkpoint is still being written is kept for it: with a
// KeptCarrier set, Reply then returns ErrKept, and the front end keeps
// the reply's request due until the carrier gives it back.
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
// find none yet. The reply is kept with the thread while it has no head,
// for the start's first save to hand over (starting.go): the start
// applies it once its run stops. A thread that never starts is not a
// conversation, and what was kept expires. A thread found with a head
// after all gets the reply as any; one whose lease is held (a start that
// took it before running) is waited for, as a reply to an answered run
// waits, and looked at again: only a thread that still has no head is
// not a conversation.
func (s *Service) replyToStarting(ctx context.Context, m Message) error {
	if m.Expired {
		switch started, err := s.takeBackReply(ctx, m); {
		case err != nil:
			return fmt.Errorf("reply to %s: %w", m.Thread, err)
		case started:
			return s.replyStarted(ctx, m)
		}
		return fmt.Errorf("reply to %s: %w", m.Thread, ErrNoThread)
	}
	switch kept, err := s.keepReply(ctx, m); {
	case err != nil:
		return fmt.Errorf("reply to %s: %w", m.Thread, err)
	case kept == KeptReply && s.carrier.Load() != nil:
		return fmt.Errorf("reply to %s: %w", m.Thread, ErrKept)
	case kept == KeptReply:
		return nil
	case kept == NotKept:
		return s.replyStarted(ctx, m)
	}
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
	return s.replyStarted(ctx, m)
}

// replyStarted answers a reply in a thread found to have a checkpoint
// after all: its first save was made as the reply came, so a run still
// working is waited for as by a kept reply.
func (s *Service) replyStarted(ctx context.Context, m Message) error {
	m.Kept = true
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
			return s.continueWith(ctx, m, ss)
		})
	case graph.Failed:
		if err := finalFailure(res); err != nil {
			return fmt.Errorf("reply to %s: %w", m.Thread, err)
		}
		return fmt.Errorf("reply to %s: %w", m.Thread, ErrFailed)
	default:
		return s.replyToRunning(ctx, m)
	}
}

// replyToRunning answers a reply to a run that is working. A streamed
// answer is read in Slack before the run saves it: a reply typed right
// after it finds the run still working, about to let go. So the reply
// waits for the lease (BusyWait) and looks again: an answered run is
// continued, a paused one gets the reply as feedback, and only a run
// still working after the wait makes the reply busy. A reply that was
// kept while the conversation started (m.Kept) finds a run that saved
// its first checkpoint and works on: it waits as a reply to an answered
// run does, a lease and BusyWait.
func (s *Service) replyToRunning(ctx context.Context, m Message) error {
	var paused *graph.Result[agent.State]
	wait := s.opts.BusyWait
	if m.Kept {
		wait += s.opts.LeaseTTL
	}
	err := s.withLeaseWithin(ctx, m.Thread, wait, func(ctx context.Context, ss *session) error {
		res, err := s.graph.State(ctx, m.Thread)
		if err != nil {
			return err
		}
		switch res.Status() {
		case graph.Done:
			return s.continueWith(ctx, m, ss)
		case graph.Paused:
			paused = res
			return nil
		}
		return errStaleGuess
	})
	switch {
	case errors.Is(err, errStaleGuess):
		return fmt.Errorf("reply to %s: %w", m.Thread, ErrBusy)
	case err != nil:
		return err
	case paused != nil:
		return s.feedback(ctx, m, paused)
	}
	return nil
}

// continueWith starts the turn of m in an answered thread, under the
// lease ss holds.
func (s *Service) continueWith(ctx context.Context, m Message, ss *session) error {
	s.awaitShown(ctx, ss)
	run := s.begin(m.Thread, "continue", logrus.Fields{"requester": m.By})
	res, err := s.graph.Continue(s.endWithSave(ctx, ss), m.Thread, s.agent.UserTurn(m.By, m.Text, m.Images))
	if errors.Is(err, graph.ErrNotDone) {
		return errStaleGuess
	}
	s.after(ctx, run, ss, res, err)
	return nil
}

// feedback applies a reply to a paused run.
func (s *Service) feedback(ctx context.Context, m Message, res *graph.Result[agent.State]) error {
	if len(m.Images) > 0 {
		m.Text += "\n[the images of this reply are not shown to the model: a reply to calls that wait is read as text]"
	}
	d := agent.Decision{Kind: agent.Respond, By: m.By, At: s.opts.Now(), Reason: m.Text}
	st := &res.State
	// Who may reject what is settled first: a check that could not be
	// made leaves the reply undecided (it is tried again), never taken
	// for "may not decide", and nothing is claimed meanwhile.
	var mine []agent.Call
	var why *RefusedError
	for c := range st.AllWaiting() {
		if c.Status == agent.Asking {
			why = refusedText("a call that waits for input is answered with its form, or its connection with the Connect button")
			continue
		}
		if c.Status != agent.Pending {
			why = refusedText("a call whose outcome is unknown is settled with its buttons")
			continue
		}
		if m.By != c.AskedBy(st) {
			rule, ok := s.agent.Rule(c.Tool)
			if !ok {
				why = refusedText("the tool " + c.Tool + " is no longer offered")
				continue
			}
			if w := notOffered(rule, &c, agent.Reject, false); w != "" {
				why = refusedText(w)
				continue
			}
			if w := s.mayDecide(ctx, m.Thread, st, &c, rule, m.By); w != nil {
				if w.TryAgain {
					s.log.WithFields(logrus.Fields{"thread": m.Thread, "call": c.Key, "by": m.By}).Warn("a reply could not be checked; it is tried again")
					return fmt.Errorf("reply to %s: %w", m.Thread, w)
				}
				why = w
				continue
			}
		}
		mine = append(mine, c)
	}
	rejected := 0
	for _, c := range mine {
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
		run := s.begin(m.Thread, "note", nil)
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
// run's calls (for a run with none waiting: any offered tool's). A run
// that failed in a way a retry cannot fix is not run again: Retry
// returns a *FinalError.
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
	if err := finalFailure(res); err != nil {
		return fmt.Errorf("retry %s: %w", m.Thread, err)
	}
	if r := s.mayRetry(ctx, m.Thread, st, m.By); r != nil {
		if r.TryAgain {
			return r // not an answer about the person: nothing to audit
		}
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
		run := s.begin(m.Thread, "retry", logrus.Fields{"by": m.By})
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
		rule, ok := s.agent.Rule(calls[i].Tool)
		if !ok || !rule.NeedsApproval() {
			continue
		}
		gated++
		r := s.mayDecide(ctx, thread, st, &calls[i], rule, by)
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
