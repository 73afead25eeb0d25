package runner

import (
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

// Reaching approvers beyond the thread (the policy's tools.Reach): copies
// of a card elsewhere, reminders, escalation.
//
// A front end posts the copies an ApprovalNeeded event asks for and
// records each under CopyKey; Decide then accepts a decision from a
// channel that holds a copy of the call's card, as it does from the
// thread's own channel, and from no other.
//
// Reminders and escalations are driven by the schedule, like expiry: a
// paused thread's next wake-up is the earliest of its pending calls'
// expiries, next reminders and escalations, and whichever process ticks
// the thread then claims each reminder and escalation once (a set-once
// claim in the thread) before telling anyone. A process that dies between
// the claim and the message loses that message: people are reminded at
// most once per interval, never twice. An escalation is recorded by its
// claim, so every process lets the people it names decide from then on.

// Copies says where a card goes beside its thread.
type Copies struct {
	// Channel gets a copy of the card ("": none).
	Channel string
	// DM are user and user-group IDs: each user, and each member of each
	// group, gets the card by direct message.
	DM []string
}

// CopyKey is the claim under which a front end records a copy of the card
// of call's decision round posted outside the thread, in channel (a
// channel or a direct message); the claim's value locates the copy (for
// Slack, its ts). With channel "" it is the prefix of all of that card's
// copies' keys.
func CopyKey(call string, round int, channel string) string {
	return fmt.Sprintf("copy:%s#%d:%s", call, round, channel)
}

// CopiesKey is the claim under which a front end records the index of
// the copies of call's card in decision round: EncodeCopies of each
// copy's channel and location. It is written once the copies are posted
// (each is recorded under CopyKey as it is), so that updating the card
// reads its copies by key.
func CopiesKey(call string, round int) string { return fmt.Sprintf("copies:%s#%d", call, round) }

// DecisionKey is the claim under which the decision of c's round (and
// revision) is recorded: a front end that finds it set knows the call
// decided, whatever the state it was shown.
func DecisionKey(c agent.Call) string { return claimKey(c) }

// CopyRecord is one copy of a card: where it was posted (Channel) and
// where it is there (TS, for Slack).
type CopyRecord struct{ Channel, TS string }

// EncodeCopies is the value of a CopiesKey claim: a line per copy.
func EncodeCopies(copies []CopyRecord) []byte {
	var b strings.Builder
	for _, c := range copies {
		b.WriteString(c.Channel + " " + c.TS + "\n")
	}
	return []byte(b.String())
}

// DecodeCopies reads what EncodeCopies wrote.
func DecodeCopies(v []byte) []CopyRecord {
	var out []CopyRecord
	for _, line := range strings.Split(string(v), "\n") {
		if to, ts, ok := strings.Cut(line, " "); ok && to != "" {
			out = append(out, CopyRecord{Channel: to, TS: ts})
		}
	}
	return out
}

func reminderKey(c agent.Call, n int) string {
	return fmt.Sprintf("reminded:%s#%d:%d", c.Key, c.Attempts, n)
}
func escalationKey(c agent.Call) string { return fmt.Sprintf("escalated:%s#%d", c.Key, c.Attempts) }

// copies says where c's card goes beside the thread, or nil.
func (s *Service) copies(c agent.Call) *Copies {
	rule, ok := s.agent.Rule(c.Tool)
	if !ok || (rule.Notify == "" && !rule.NotifyDM) {
		return nil
	}
	out := &Copies{Channel: rule.Notify}
	if rule.NotifyDM {
		out.DM = slices.Clone(rule.Approvers)
	}
	return out
}

// claimSet reports whether the thread's claim key is set.
func (s *Service) claimSet(ctx context.Context, thread, key string) (bool, error) {
	got, err := s.store.ClaimValues(ctx, thread, []string{key})
	if err != nil {
		return false, err
	}
	_, ok := got[key]
	return ok, nil
}

// channelRefusal says why a decision from channel may not decide c, or
// nil if channel is the thread's or holds a copy of c's card. A failed
// look-up of the copies is a "try again", never an answer.
func (s *Service) channelRefusal(ctx context.Context, st *agent.State, c *agent.Call, thread, channel string) *RefusedError {
	const elsewhere = "this card belongs to another channel"
	if channel == st.Channel {
		return nil
	}
	if channel == "" {
		return refusedText(elsewhere)
	}
	copied, err := s.claimSet(ctx, thread, CopyKey(c.Key, c.Attempts, channel))
	if err != nil {
		s.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key}).WithError(err).Warn("checking the card's copies")
		return tryAgain("I couldn't check where this card was posted; please try again")
	}
	if !copied {
		return refusedText(elsewhere)
	}
	return nil
}

// awaited are the people to remind of c: the rule's approvers, and those
// it was escalated to once it was, without the person who asked when
// they may not approve their own request.
func awaited(st *agent.State, c *agent.Call, rule tools.Rule, escalated bool) []string {
	people := slices.Clone(rule.Approvers)
	if escalated {
		for _, id := range rule.EscalateTo {
			if !slices.Contains(people, id) {
				people = append(people, id)
			}
		}
	}
	if !rule.SelfApproval {
		people = slices.DeleteFunc(people, func(id string) bool { return id == c.AskedBy(st) })
	}
	return people
}

// nudge sends the reminders and escalations due for the pending calls of
// the paused thread at res, each once whichever process ticks the thread.
func (s *Service) nudge(ctx context.Context, thread string, res *graph.Result[agent.State]) error {
	now := s.opts.Now()
	st := &res.State
	var errs []error
	for c := range st.AllWaiting() {
		if c.Status != agent.Pending || c.Since.IsZero() || (!c.Expires.IsZero() && !now.Before(c.Expires)) {
			continue
		}
		rule, ok := s.agent.Rule(c.Tool)
		if !ok {
			continue
		}
		log := s.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key, "tool": c.Tool})
		waited := now.Sub(c.Since)
		escalated := false
		if rule.EscalateAfter > 0 && waited >= rule.EscalateAfter {
			won, err := s.claimOnce(ctx, thread, escalationKey(c), now)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			escalated = true
			if won {
				log.WithField("to", strings.Join(rule.EscalateTo, ",")).Info("call escalated")
				s.audit(ctx, thread, c, map[string]string{"decision": "escalated", "to": strings.Join(rule.EscalateTo, ","),
					"at": now.UTC().Format(time.RFC3339Nano)})
				_ = s.report(ctx, Event{Kind: Escalated, Thread: thread, State: st, Call: &c,
					People: slices.Clone(rule.EscalateTo), Waited: rule.EscalateAfter})
			}
		}
		if rule.RemindAfter <= 0 {
			continue
		}
		n := min(int(waited/rule.RemindAfter), rule.Reminders())
		if n < 1 {
			continue
		}
		won, err := s.claimOnce(ctx, thread, reminderKey(c, n), now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if won {
			log.WithField("reminder", n).Info("reminding the approvers")
			people := awaited(st, &c, rule, escalated)
			// Of a call that needs several approvals, those who have
			// approved already are not reminded.
			if g, err := s.Gate(ctx, thread, st, c); err == nil && g != nil {
				people = slices.DeleteFunc(people, g.Approved)
			}
			_ = s.report(ctx, Event{Kind: Reminder, Thread: thread, State: st, Call: &c,
				People: people, Waited: time.Duration(n) * rule.RemindAfter})
		}
	}
	return errors.Join(errs...)
}

// claimOnce sets the thread's claim key, and reports whether this call
// set it.
func (s *Service) claimOnce(ctx context.Context, thread, key string, now time.Time) (bool, error) {
	_, won, err := s.store.Claim(ctx, thread, key, []byte(now.UTC().Format(time.RFC3339Nano)))
	if err != nil {
		return false, fmt.Errorf("claim %s: %w", key, err)
	}
	return won, nil
}

// nextNudge is when c, waiting since c.Since under rule, is next to be
// reminded or escalated after now, before it expires; zero if never.
func nextNudge(c agent.Call, rule tools.Rule, now time.Time) time.Time {
	var at time.Time
	if c.Status != agent.Pending || c.Since.IsZero() {
		return at
	}
	consider := func(t time.Time) {
		if t.After(now) && (c.Expires.IsZero() || t.Before(c.Expires)) && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if rule.EscalateAfter > 0 {
		consider(c.Since.Add(rule.EscalateAfter))
	}
	if rule.RemindAfter > 0 {
		if n := int(now.Sub(c.Since)/rule.RemindAfter) + 1; n <= rule.Reminders() {
			consider(c.Since.Add(time.Duration(n) * rule.RemindAfter))
		}
	}
	return at
}
