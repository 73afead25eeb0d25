package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
)

// Claiming decisions: each decision on a call is a set-once record, so
// that of concurrent decisions exactly one wins and the rest learn who
// did; claimed decisions are applied when the thread is next driven.

// decidedMeanwhile reports whether claims (read as the session let go)
// hold a decision on a call that waits at the session's last result.
func (s *Service) decidedMeanwhile(ss *session, claims map[string][]byte) bool {
	if ss.res == nil || ss.res.Status() != graph.Paused {
		return ss.res == nil
	}
	for c := range ss.res.State.AllWaiting() {
		if _, ok := claims[claimKey(c)]; ok {
			return true
		}
		if unshownApprovals(ss, c, claims) {
			return true
		}
	}
	return false
}

// changedMeanwhile reports whether claims (read as the session let go)
// hold a decision or approvals on a call that waits at the session's
// last result that the session had not read when it began.
func (s *Service) changedMeanwhile(ss *session, claims map[string][]byte) bool {
	if ss.res == nil || ss.res.Status() != graph.Paused {
		return false
	}
	for c := range ss.res.State.AllWaiting() {
		if _, ok := claims[claimKey(c)]; ok {
			if _, had := ss.claims[claimKey(c)]; !had {
				return true
			}
		}
		if keys := quorumKeys(c); len(keys) > 0 && !bytes.Equal(claims[keys[0]], ss.claims[keys[0]]) {
			return true
		}
	}
	return false
}

// unshownApprovals reports whether claims hold approvals of c that the
// session has not shown.
func unshownApprovals(ss *session, c agent.Call, claims map[string][]byte) bool {
	if len(quorumKeys(c)) == 0 {
		return false
	}
	n := len(approvalsOf(claims, c))
	_, shown := ss.claims[progressKey(c, n)]
	return !shown && (n > 0 || c.Revision > 0)
}

// claimed returns the claimed decisions for calls that still wait.
func (s *Service) claimed(ss *session, st *agent.State) (map[string]agent.Decision, error) {
	out := map[string]agent.Decision{}
	for c := range st.AllWaiting() {
		raw, ok := ss.claims[claimKey(c)]
		if !ok {
			continue
		}
		d, err := decodeClaim(raw)
		if err != nil {
			return nil, fmt.Errorf("claim on %s: %w", c.Key, err)
		}
		if err := s.agent.CheckDecision(st, c.Key, d); err != nil {
			s.log.WithFields(logrus.Fields{"thread": ss.thread, "call": c.Key}).WithError(err).Warn("claimed decision does not apply; ignoring it")
			continue
		}
		out[c.Key] = d
	}
	return out, nil
}

// claim records d as the decision on call c, or returns who won.
func (s *Service) claim(ctx context.Context, thread string, c agent.Call, d agent.Decision, expectHead string) error {
	key := c.Key
	raw, err := decisionJSON(d)
	if err != nil {
		return err
	}
	// The thread is woken before the claim is written: should this
	// process die before applying the decision, another applies it
	// within a lease, whatever the thread's next wake-up was.
	var wake time.Time
	if s.opts.Schedule {
		wake = s.opts.Now().Add(s.opts.LeaseTTL)
	}
	var audit map[string]string
	if s.opts.Audit {
		audit = s.completeRecord(thread, c, decisionFields(d))
	}
	// The claim also takes the lease, if it is free, for the drive that
	// applies the decision; should that drive not come, the lease lapses
	// and the wake-up written here carries it on.
	var keys []string
	if cached, ok := s.graph.Cached(thread); ok {
		keys = neededKeys(cached)
	}
	sent := time.Now()
	shown := s.takeRecords(thread)
	record, answered := recordsOf(shown)
	got, err := s.store.ClaimDecision(ctx, DecisionClaim{Thread: thread, Key: claimKey(c), Value: raw,
		ExpectHead: expectHead, WakeBy: wake, Audit: audit,
		LeaseOwner: s.opts.Owner, LeaseTTL: s.opts.LeaseTTL, Keys: keys, Record: record, Answered: answered})
	if err != nil {
		s.returnRecords(thread, shown)
	}
	winner, won := got.Winner, got.Won
	if err == nil && got.Leased {
		s.keepLeased(thread, got.Token, got.Head, got.Claims, keys, sent)
	}
	if errors.Is(err, ErrStale) {
		return fmt.Errorf("claim decision on %s: %w", key, err)
	}
	if err != nil {
		// The claim may have been written, its answer lost: what became
		// of it is learnt by reading it back (DecideAndDrive).
		return &unsettledClaim{thread: thread, key: key, claimKey: claimKey(c), raw: raw, err: err}
	}
	if !won && bytes.Equal(winner, raw) {
		// go-redis sent the claim again after its answer was lost, and
		// found the claim its first attempt wrote: the value (who,
		// when) is this decision's own, so it won. A lease that attempt
		// took is not known here; the wake-up written above carries the
		// decision on when it lapses.
		won = true
	}
	if won {
		s.log.WithFields(logrus.Fields{"thread": thread, "call": key, "decision": d.Kind.String(), "by": d.By}).Info("decision claimed")
		var waited time.Duration
		if !c.Since.IsZero() && !d.At.IsZero() {
			waited = d.At.Sub(c.Since)
		}
		s.opts.Observer.Decided(d.Kind, waited)
		return nil
	}
	first, err := decodeClaim(winner)
	if err != nil {
		return fmt.Errorf("claim decision on %s: %w", key, err)
	}
	return &AlreadyDecidedError{Key: key, Decision: first}
}

// unsettledClaim is the error of a decision's claim that the store did
// not answer: it may or may not have been written.
type unsettledClaim struct {
	thread, key, claimKey string
	raw                   []byte // the claim's value
	err                   error
}

func (e *unsettledClaim) Error() string {
	return fmt.Sprintf("claim decision on %s: %v: %v", e.key, ErrUnsettled, e.err)
}

func (e *unsettledClaim) Unwrap() []error { return []error{ErrUnsettled, e.err} }

// decisionFields describes a decision for the audit record.
func decisionFields(d agent.Decision) map[string]string {
	f := make(map[string]string, recordSize)
	f["decision"], f["by"], f["at"] = d.Kind.String(), d.By, d.At.UTC().Format(time.RFC3339Nano)
	if d.Hash != "" {
		f["hash"] = d.Hash
	}
	if len(d.Args) > 0 {
		f["edited_args"] = string(d.Args)
	}
	if d.Reason != "" {
		f["reason"] = d.Reason
	}
	return f
}

// wakeBy makes sure the thread is looked at no later than at, if the
// service keeps a schedule.
func (s *Service) wakeBy(ctx context.Context, thread string, at time.Time) {
	if !s.opts.Schedule {
		return
	}
	if err := s.store.WakeBy(ctx, thread, at); err != nil {
		s.log.WithField("thread", thread).WithError(err).Warn("updating the schedule")
	}
}

// claimKey names the decision on a call in its current round. A call
// waits for a decision once, or again after a crash cut off its run
// (outcome unknown), or again after an edit when it needs several
// approvals; the earlier round's decision must not answer the later one,
// so the key counts the call's attempts and revisions.
func claimKey(c agent.Call) string { return roundKey("decision:", c.Key, c.Attempts, c.Revision) }

// roundKey is prefix, then "KEY#ATTEMPTS", then ".eREVISION" if revision
// is not 0. (Concatenated: these keys are made several times a step.)
func roundKey(prefix, key string, attempts, revision int) string {
	if revision > 0 {
		return prefix + key + "#" + strconv.Itoa(attempts) + ".e" + strconv.Itoa(revision)
	}
	return prefix + key + "#" + strconv.Itoa(attempts)
}

// keepLeased keeps, for the drive that follows, the session a claim began
// when it took the thread's lease: the acquisition's token, the head and
// the claims of keys read with it, confirmed as of sent.
func (s *Service) keepLeased(thread, token, head string, claims map[string][]byte, keys []string, sent time.Time) {
	s.keepOpened(s.leasedSession(thread, token, head, claims, keys, sent))
}

// leasedSession is the session of an acquisition of the thread's lease
// (token), which read the head and the claims of keys with it, confirmed
// as of sent.
func (s *Service) leasedSession(thread, token, head string, claims map[string][]byte, keys []string, sent time.Time) *session {
	if claims == nil {
		claims = map[string][]byte{}
	}
	ss := &session{thread: thread, token: token, head: head, claims: claims, asked: make(map[string]bool, len(keys)), answered: -1}
	for _, k := range keys {
		ss.asked[k] = true
	}
	ss.confirm(sent)
	return ss
}
