package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/tools"
)

// The audit trail. Every entry names an event:
//
//	decision   a decision claimed: approve, edit, reject, respond,
//	           mark_done, expire, retry_run, …
//	refusal    a decision someone may not make ("decision": "refused")
//	note       a reply from someone who may not decide, kept for the model
//	execution  a call about to be sent to its tool
//	outcome    what became of a call: done, failed, unknown (cut off, by a
//	           crash or a tool that could not tell), skipped or marked_done
//	           (a person settled an unknown outcome), asking (the server
//	           needs input, or the requester a connection, first: the run
//	           paused, and the call's next attempt follows the answer)
//
// with the thread, the call, the tool, the arguments the model gave
// ("args", credentials masked) and their hash ("args_hash"), and when a
// person edited them, the edited arguments ("edited_args", masked) and
// their hash ("edited_args_hash"): a decision decided, and an execution
// sent, the edited arguments when there are, else the model's. Who ("by", and for executions and
// outcomes the "requester" and the "replica" that ran the call) and when
// ("at"). A decision's entry is written with its claim. An execution's is
// written before the call is sent, and a call whose execution cannot be
// recorded is not sent. Outcomes are written with the next execution or
// when the process lets go of the thread, whichever comes first: a
// process that dies in between leaves the execution without its outcome
// in the trail (the checkpoint has it).

// auditAll appends records in one round trip.
func (s *Service) auditAll(ctx context.Context, records []map[string]string) error {
	if len(records) == 0 {
		return nil
	}
	return s.store.AuditAll(ctx, records)
}

// SaveAudit holds audit entries that a checkpoint's save may append in
// the same step, where the store can (on a single server, redisstore):
// the execution of a call, and the outcomes queued before it, with the
// save that marks the call running. A store that appended them says so
// with Appended; one that cannot leaves them, and BeforeCall appends them
// on their own, after its lease check, as without a SaveAudit.
type SaveAudit struct {
	Records  []map[string]string
	queued   int // of Records, the session's queued entries
	appended atomic.Bool
}

// Appended records that the store appended Records with the save.
func (a *SaveAudit) Appended() { a.appended.Store(true) }

// Pending reports whether Records are still to be appended.
func (a *SaveAudit) Pending() bool { return !a.appended.Load() }

type saveAuditKey struct{}

var _ agent.RunningSaver = (*Service)(nil)

// WithSaveAudit returns ctx for a save that carries a's entries; a nil a
// carries none.
func WithSaveAudit(ctx context.Context, a *SaveAudit) context.Context {
	return context.WithValue(ctx, saveAuditKey{}, a)
}

// SaveAuditOf returns the entries to append with the save ctx belongs
// to, or nil.
func SaveAuditOf(ctx context.Context) *SaveAudit {
	a, _ := ctx.Value(saveAuditKey{}).(*SaveAudit)
	return a
}

// RunningSave is the agent's hook before the save that marks call c
// running (agent.RunningSaver): the save carries the call's execution
// entry, with the outcomes the session has not written yet, so that a
// store that can write both in one step spares BeforeCall a round trip.
func (s *Service) RunningSave(ctx context.Context, st *agent.State, c agent.Call) context.Context {
	ss, _ := ctx.Value(sessionKey{}).(*session)
	if !s.opts.Audit || ss == nil || ss.token == "" {
		return ctx
	}
	queued := ss.peekAudit()
	rec := s.completeRecord(runThread(ctx, st), c, s.callFields(st, c, "execution"))
	return WithSaveAudit(ctx, &SaveAudit{Records: append(queued, rec), queued: len(queued)})
}

// NotSent is the agent's hook when the save that marked call c running
// was not confirmed durable (agent.RunningSaver): the call is not sent.
// When that save appended the call's execution to the audit trail
// (RunningSave, on a single server), the trail says it was not sent
// after all, as when the lease is lost before the send (BeforeCall): a
// replica that got the save late, and takes over, has the execution
// followed by its "unsent" outcome, once that is written (with the
// session's next entries, which wait for the replicas too).
func (s *Service) NotSent(ctx context.Context, st *agent.State, c agent.Call) {
	if s.opts.Audit && savedExecution(ctx) {
		s.auditOutcome(ctx, st, c, "unsent", map[string]string{"reason": "the save that marked it running was not confirmed by the Redis replicas"})
	}
}

// savedExecution reports whether the save before the call appended its
// execution entry (RunningSave), and then forgets the session's queued
// entries that went with it.
func savedExecution(ctx context.Context) bool {
	a := SaveAuditOf(ctx)
	if a == nil || !a.appended.Load() {
		return false
	}
	if ss, ok := ctx.Value(sessionKey{}).(*session); ok {
		ss.dropAuditFront(a.queued)
	}
	return true
}

// auditExecution records that call c of st is about to be sent, with the
// outcomes the session has not written yet, unless the save that marked
// it running did.
func (s *Service) auditExecution(ctx context.Context, st *agent.State, c agent.Call) error {
	if !s.opts.Audit || savedExecution(ctx) {
		return nil
	}
	thread := runThread(ctx, st)
	rec := s.completeRecord(thread, c, s.callFields(st, c, "execution"))
	ss, _ := ctx.Value(sessionKey{}).(*session)
	var queued []map[string]string
	if ss != nil {
		queued = ss.takeAudit()
	}
	if err := s.auditAll(ctx, append(queued, rec)); err != nil {
		if ss != nil {
			ss.queueAudit(queued...)
		}
		s.log.WithFields(logrus.Fields{"thread": thread, "call": c.Key, "tool": c.Tool}).WithError(err).Error("the execution cannot be audited; the call is not sent")
		return fmt.Errorf("audit the execution of %s: %w", c.Key, err)
	}
	return nil
}

// auditOutcome records what became of call c: its status, or outcome
// when a person settled it. It is written with the session's next
// entries, or at once without a session.
func (s *Service) auditOutcome(ctx context.Context, st *agent.State, c agent.Call, outcome string, extra map[string]string) {
	if !s.opts.Audit {
		return
	}
	fields := s.callFields(st, c, "outcome")
	fields["outcome"] = outcome
	for k, v := range extra {
		fields[k] = v
	}
	thread := runThread(ctx, st)
	if ss, ok := ctx.Value(sessionKey{}).(*session); ok {
		ss.queueAudit(s.completeRecord(thread, c, fields))
		return
	}
	s.audit(ctx, thread, c, fields)
}

// callFields are the fields of an execution's or an outcome's entry.
func (s *Service) callFields(st *agent.State, c agent.Call, event string) map[string]string {
	// They become the record (completeRecord): room for its fields, and
	// for an outcome's.
	f := make(map[string]string, recordSize)
	f["event"], f["attempt"] = event, strconv.Itoa(c.Attempts)
	f["requester"], f["replica"], f["at"] = c.AskedBy(st), s.opts.Owner, s.opts.Now().UTC().Format(time.RFC3339Nano)
	if d := c.Decision; d != nil && d.Kind != agent.Expire {
		f["by"], f["decision"] = d.By, d.Kind.String()
	}
	if event == "execution" {
		if as := s.agent.RunsAs(st, c); as != "" {
			f["as"] = as // whose identity the call runs with, never a token
		}
	}
	return f
}

// auditRecord is the audit record of an event about call c. fields name
// the event; "edited_args", if there, are the arguments an edit decided
// (otherwise the call's, if a person edited them before). The record
// carries each set of arguments with its hash (tools.ArgsHash of the
// tool and the canonical arguments, the hash a card shows), secrets in
// the arguments masked: "args" and "args_hash" for the model's,
// "edited_args" and "edited_args_hash" for the edited ones. A
// decision's own "hash" (the hash the person saw) is one of the two and
// is not kept apart ("hash" is the audit chain's). "event" is
// "refusal" for a refused decision, "note" for a noted reply, else
// "decision" unless fields say.
func (s *Service) auditRecord(thread string, c agent.Call, fields map[string]string) map[string]string {
	rec := make(map[string]string, len(fields)+6)
	maps.Copy(rec, fields)
	return s.completeRecord(thread, c, rec)
}

// recordSize is room for the fields of an audit record of a call, so
// that the map made for them does not grow as they are added.
const recordSize = 14

// completeRecord is auditRecord that makes the record of fields
// themselves: for fields the service made for it, and nobody else holds.
func (s *Service) completeRecord(thread string, c agent.Call, rec map[string]string) map[string]string {
	for _, kv := range [...][2]string{{"thread", thread}, {"call", c.Key}, {"tool", c.Tool}} {
		if _, set := rec[kv[0]]; !set {
			rec[kv[0]] = kv[1]
		}
	}
	delete(rec, "hash")
	edited := c.EditedArgs
	if e, ok := rec["edited_args"]; ok {
		edited = json.RawMessage(e)
	}
	rec["args"] = tools.MaskedString(c.Tool, c.Args)
	rec["args_hash"] = tools.ArgsHash(c.Tool, c.Args)
	if len(edited) > 0 {
		rec["edited_args"] = tools.MaskedString(c.Tool, edited)
		rec["edited_args_hash"] = tools.ArgsHash(c.Tool, edited)
	}
	if rec["event"] == "" {
		switch rec["decision"] {
		case "refused":
			rec["event"] = "refusal"
		case "noted":
			rec["event"] = "note"
		default:
			rec["event"] = "decision"
		}
	}
	return rec
}

// auditFinished records the outcome of a call that ran (OnCall): done,
// failed, or unknown when the tool could not tell.
func (s *Service) auditFinished(ctx context.Context, st *agent.State, c agent.Call) {
	switch c.Status {
	case agent.Done:
		sum := sha256.Sum256([]byte(c.Result))
		var digits [2 * len(sum)]byte
		hex.Encode(digits[:], sum[:])
		s.auditOutcome(ctx, st, c, "done", map[string]string{"result_sha256": string(digits[:])})
	case agent.Failed:
		s.auditOutcome(ctx, st, c, "failed", map[string]string{"error": firstLine(c.Result, 300)})
	case agent.Unknown:
		s.auditOutcome(ctx, st, c, "unknown", map[string]string{"reason": "the tool could not tell whether the call had its effect"})
	}
}

// auditCutOff records the outcome of the calls that were running at
// before and are unknown at after: a run cut off by a crash, recovered.
func (s *Service) auditCutOff(ctx context.Context, before, after *graph.Result[agent.State]) {
	if before == nil || after == nil {
		return
	}
	for _, b := range before.State.Calls {
		if b.Status != agent.Running {
			continue
		}
		if c, ok := after.State.Call(b.Key); ok && c.Status == agent.Unknown {
			s.auditOutcome(ctx, &after.State, *c, "unknown", map[string]string{"reason": "the run was cut off while the call ran"})
		}
	}
}

// auditSettled records the outcome of unknown calls that people settled
// with decisions (Mark done, Skip), as the decisions are applied; keys
// are the decisions' keys, sorted.
func (s *Service) auditSettled(ctx context.Context, before *graph.Result[agent.State], keys []string, decisions map[string]agent.Decision) {
	for _, key := range keys {
		d := decisions[key]
		c, ok := before.State.Call(key)
		if !ok || c.Status != agent.Unknown {
			continue
		}
		settled := *c
		settled.Decision = &d
		switch d.Kind {
		case agent.MarkDone:
			s.auditOutcome(ctx, &before.State, settled, "marked_done", nil)
		case agent.Reject, agent.Respond:
			s.auditOutcome(ctx, &before.State, settled, "skipped", nil)
		}
	}
}

// firstLine is s's first line, cut to n bytes at most (on a rune
// boundary).
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
