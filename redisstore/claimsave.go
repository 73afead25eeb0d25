package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/runner"
)

// A save that carries a decision's claim (runner.SavedClaim): the first
// save of the run that a click resumes claims the decision, takes the
// thread's lease and writes the checkpoint in one script, claimSaveLua,
// where a claim and that save were two round trips. On a single server
// only: the wake-up schedule and the audit stream are in other slots on
// a cluster, where the claim (ClaimDecision) and the save stay apart.

// ClaimsWithSaves implements runner.Sessions: on a single server a save
// can carry a claim.
func (s *Store) ClaimsWithSaves() bool { return !s.isCluster() }

// saveClaiming is Save of a checkpoint whose context carries the claim
// sc: on its first save, claimSaveLua; later, a plain save if that one
// saved, else a refusal as fenced (the run never held the lease).
// saveArgs are saveLua's first eleven arguments; sa, if not nil, the
// audit entries that go with the save. handled is false when the save
// is a plain one, for Save to make.
func (s *Store) saveClaiming(ctx context.Context, cp *graph.Checkpoint, k threadKeys, saveArgs []any, sc *runner.SavedClaim, sa *runner.SaveAudit) (saved int, handled bool, err error) {
	if r, answered := sc.Answered(); answered {
		if r.Outcome == runner.ClaimSaved {
			return 0, false, nil
		}
		return -1, true, nil
	}
	if sc.WasUnconfirmed() {
		// The step ran, and saved, on the master alone (unreplicated,
		// below): the run's later saves are plain ones, fenced by the
		// lease it took.
		return 0, false, nil
	}
	if sc.WasLost() {
		return -1, true, nil // see runner.SavedClaim.Lost
	}
	c := sc.Claim
	if s.isCluster() {
		return 0, true, fmt.Errorf("claim %s with a save: %w", c.Key, errClaimSaveCluster)
	}
	if err := checkClaimKeys(append([]string{c.Key}, c.Record...)...); err != nil {
		return 0, true, fmt.Errorf("claim %s: %w", c.Key, err)
	}
	if c.Thread != cp.Thread || sc.Token == "" || sc.Token != graph.Fence(ctx) || c.ExpectHead == "" || c.ExpectHead != cp.Parent {
		return 0, true, fmt.Errorf("claim %s with the save of %s: %w", c.Key, cp.ID, errClaimSaveMismatch)
	}
	// The decision's entry and the save's are sealed as one chain, then
	// sent as two blocks: the decision's is appended with the claim, the
	// save's only if the checkpoint is saved.
	var decided, withSave []any
	records := make([]map[string]string, 0, 2)
	if c.Audit != nil {
		records = append(records, c.Audit)
	}
	if sa != nil {
		records = append(records, sa.Records...)
	}
	if len(records) > 0 {
		block, err := s.auditBlock(records)
		if err != nil {
			return 0, true, fmt.Errorf("claim %s: %w", c.Key, err)
		}
		if c.Audit != nil {
			decided, withSave = splitAuditBlock(block)
		} else {
			withSave = block
		}
	}
	keys := []string{k.head, k.journal, k.history, k.claims, k.lease, s.wakeups, s.auditStream, s.auditHead}
	args := make([]any, 0, len(saveArgs)+16+len(c.Record)+len(decided)+len(withSave)+len(c.Keys)+len(cp.Journal))
	args = append(args, saveArgs...)
	answered := ""
	if c.Answered > 0 {
		answered = strconv.Itoa(c.Answered)
	}
	args = append(args, c.Key, c.Value, c.Thread, unixMs(c.WakeBy), c.LeaseTTL.Milliseconds(), s.auditMinID(), answered, len(c.Record))
	for _, key := range c.Record {
		args = append(args, key)
	}
	args = append(args, len(decided))
	args = append(args, decided...)
	args = append(args, len(withSave))
	args = append(args, withSave...)
	read := claimSaveReads(c)
	args = append(args, len(read))
	for _, key := range read {
		args = append(args, key)
	}
	for _, e := range cp.Journal {
		args = append(args, []byte(e))
	}
	sent := time.Now()
	cmd := s.runScript(ctx, s.claimSaveScript, claimSaveLua, keys, args...)
	res, err := cmd.Slice()
	if answerLost(err) {
		res, err = s.claimSaveAgain(ctx, sent.Add(c.LeaseTTL/2), keys, args)
	}
	var unreplicated error
	if errors.Is(err, ErrNotReplicated) {
		if v, ok := cmd.Val().([]any); ok {
			res, unreplicated, err = v, err, nil
		}
	}
	if err != nil {
		sc.Lost()
		return 0, true, err
	}
	r, saved, err := s.claimSaved(ctx, res, sc, sa)
	if err != nil {
		return 0, true, err
	}
	if unreplicated != nil {
		// The step ran on the master, and no replica is known to
		// have it. The decision is settled by the claim as the
		// replicas have it: it is read back, with a WAIT, as a claim
		// whose answer was lost (Lost). A checkpoint it saved (saved
		// is 1: the call marked running) is unconfirmed: the run does
		// not send the call, and follows the save with one that says
		// so (graph.WithFollowUp), rather than leave the master with
		// a call marked running that was never sent.
		if saved == 1 {
			sc.Unconfirmed()
		} else {
			sc.Lost()
		}
		return saved, true, unreplicated
	}
	sc.Answer(r)
	return saved, true, nil
}

// claimSaveAgain sends claimSaveLua again, until Redis answers or until
// by, after the client gave up on it with its answer lost (the link cut
// and not back within the client's own retries). The step may have run:
// it claimed the decision and took the lease, and a person may have been
// told their decision is being recorded. Sent again, the script answers
// as that first attempt did, or makes the step if the attempt never
// reached Redis; either way the run learns what became of the claim and
// goes on, its call sent once. by is well within the lease the first
// attempt took, which nothing renews until the step answers: a resend
// later could find the lease lapsed and another process applying the
// claim.
func (s *Store) claimSaveAgain(ctx context.Context, by time.Time, keys []string, args []any) ([]any, error) {
	var err error
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		if time.Now().Add(backoff).After(by) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, context.Cause(ctx))
		case <-time.After(backoff):
		}
		var res []any
		res, err = s.runScript(ctx, s.claimSaveScript, claimSaveLua, keys, args...).Slice()
		if !answerLost(err) {
			return res, err
		}
	}
}

// answerLost reports whether err leaves a command's answer unknown: the
// link failed (not an error answer from Redis, nor the caller giving up
// or the client closed), so the command may or may not have run.
func answerLost(err error) bool {
	var reply redis.Error
	return err != nil && !errors.As(err, &reply) && !errors.Is(err, redis.ErrClosed) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// claimSaved reads claimSaveLua's reply: what became of the claim, and
// saveLua's reply for the save (1 saved, -1 not).
func (s *Store) claimSaved(ctx context.Context, res []any, sc *runner.SavedClaim, sa *runner.SaveAudit) (runner.ClaimResult, int, error) {
	c := sc.Claim
	read := claimSaveReads(c)
	if len(res) == 0 {
		return runner.ClaimResult{}, 0, fmt.Errorf("unexpected reply %v", res)
	}
	code, _ := res[0].(int64)
	switch {
	case code == -1 && len(res) == 1:
		return runner.ClaimResult{Outcome: runner.ClaimStale}, -1, nil
	case code == 0 && len(res) == 2:
		stored, ok := res[1].(string)
		if !ok {
			break
		}
		return runner.ClaimResult{Outcome: runner.ClaimLost, Winner: []byte(stored)}, -1, nil
	case code == 2 && len(res) == 4:
		r := runner.ClaimResult{Outcome: runner.ClaimBusy}
		if c.Audit != nil {
			r.AuditErr = s.auditAfter(ctx, auditReply(res, 1), c.Audit)
		}
		return r, -1, nil
	case code == 3 && len(res) == 8+len(read):
		r := runner.ClaimResult{Outcome: runner.ClaimLeased, Claims: claimSaveValues(c, read, res[7], res[8:])}
		if c.Audit != nil {
			r.AuditErr = s.auditAfter(ctx, auditReply(res, 1), c.Audit)
		}
		return r, -1, nil
	case code == 1 && len(res) == 8+len(read):
		r := runner.ClaimResult{Outcome: runner.ClaimSaved, Claims: claimSaveValues(c, read, res[7], res[8:])}
		// The save's entries were appended only if the decision's were
		// (they are chained to it): if not, the decision's go now, and
		// the save's are left to the runner, which appends them before
		// the call is sent (BeforeCall).
		if c.Audit != nil {
			r.AuditErr = s.auditAfter(ctx, auditReply(res, 1), c.Audit)
		}
		if sa != nil {
			if reply := auditReply(res, 4); reply != nil {
				if appended, err := s.learnAuditHead(reply); err == nil && appended {
					sa.Appended()
				}
			}
		}
		return r, 1, nil
	}
	return runner.ClaimResult{}, 0, fmt.Errorf("unexpected reply %v", res)
}

// claimSaveReads are the claims of c.Keys that claimSaveLua reads back:
// not the claim itself, nor a delivery it records, whose values are
// known once the step goes on past the claim, nor "answered", which the
// script reads and returns whatever it is asked (claimSaveValues). Each
// key sent costs Redis about a thousand instructions.
func claimSaveReads(c runner.DecisionClaim) []string {
	read := make([]string, 0, len(c.Keys))
	for _, key := range c.Keys {
		if key != c.Key && key != claimAnswered && !slices.Contains(c.Record, key) {
			read = append(read, key)
		}
	}
	return read
}

// claimSaveValues are the claims of c.Keys once claimSaveLua has set
// the claim: those it read (read, vals), "answered" (answered, as the
// script returns it), and those it wrote, the claim (c.Value) and the
// deliveries (set once to "1").
func claimSaveValues(c runner.DecisionClaim, read []string, answered any, vals []any) map[string][]byte {
	out := claimValues(read, vals)
	for _, key := range c.Keys {
		switch {
		case key == c.Key:
			out[key] = c.Value
		case key == claimAnswered:
			if v, ok := answered.(string); ok {
				out[key] = []byte(v)
			}
		case slices.Contains(c.Record, key):
			out[key] = []byte("1")
		}
	}
	return out
}

// splitAuditBlock splits an audit block (auditBlock) of at least one
// record into a block of its first record and a block of the others,
// chained to it, without the hash they follow: the first block's last
// (claimSaveLua takes it from there).
func splitAuditBlock(block []any) (first, rest []any) {
	// [head hash, n, then per record: seq, hash, packed fields]
	n, _ := block[1].(int)
	first = []any{block[0], 1, block[2], block[3], block[4]}
	rest = make([]any, 0, len(block)-4)
	rest = append(rest, n-1)
	rest = append(rest, block[5:]...)
	return first, rest
}

// claimAnswered is the claims hash's field of the count of answers
// delivered, which only grows.
const claimAnswered = "answered"

var (
	errClaimSaveCluster  = fmt.Errorf("a save carries no claim on a cluster")
	errClaimSaveMismatch = fmt.Errorf("the claim does not go with this save")
)

// auditHadLua defines audit_had(stream, head, a, i), for a script sent
// again after its first attempt's answer was lost: whether the block of
// audit_append's arguments at a[i] was appended, which that attempt
// did or not. It returns audit_append's three values as the append of
// the block would have (1, then the block's last hash and seq) when the
// block's last entry is the chain's head or among the stream's latest
// auditHadScan entries; else 0 and the head's hash and seq, as an append
// that found the head moved, for the caller to append the entries on
// their own. Scripts define it where they need it, on the path of a
// resend alone (a function defined costs each call that defines it).
const auditHadLua = `
  local function audit_had(stream, head, a, i)
    local j, last, lastseq = i + 2, nil, nil
    for _ = 1, tonumber(a[i + 1]) do
      last, lastseq = a[j + 1], a[j]
      j = j + 3
    end
    local h = redis.call('HMGET', head, 'hash', 'seq')
    if last and h[1] ~= last then
      local found = false
      for _, e in ipairs(redis.call('XREVRANGE', stream, '+', '-', 'COUNT', ` + auditHadScan + `)) do
        local f = e[2]
        for n = 1, #f - 1, 2 do
          if f[n] == 'hash' and f[n + 1] == last then found = true end
        end
        if found then break end
      end
      if not found then return 0, h[1] or '', tonumber(h[2]) or 0 end
    end
    return 1, last or h[1] or '', tonumber(lastseq or h[2]) or 0
  end
`

// auditHadScan is how many of the audit stream's latest entries
// audit_had looks through for a block's last entry: those appended
// between a script's first attempt and its resend, milliseconds apart.
const auditHadScan = "100"

// claimSaveLua claims a decision with the first save of the run that
// resumes with it (saveClaiming).
//
//	KEYS: saveLua's (head, journal, history, claims, lease), then wakeups,
//	      audit stream, audit head
//	ARGV: saveLua's first 11 (the fence, ARGV[8], is the lease token to
//	      take; the parent, ARGV[10], the head the claim expects), then
//	      the claim key, its value, the thread, the wake-up (unix ms or
//	      ''), the lease ms, the audit minimum ID, the answered count or
//	      '', the number m of deliveries to record and those m, the
//	      number a of the decision's audit arguments and those a
//	      (audit_append's block), the number b of the save's audit
//	      arguments and those b (audit_append's block; when a > 0,
//	      without its first, the hash the entries follow: the last of
//	      the decision's block), the number k of claim keys to read and
//	      those k (not the claim, a delivery nor "answered":
//	      claimSaveReads), then the new journal entries
//
// Steps, in order, each only if the one before passed: the head must be
// the parent (else {-1}, nothing written); the deliveries are recorded
// (set once to "1"; "answered" only grows) and the wake-up moved no
// later than the one given; the claim is set once (else {0, the stored
// value}); the decision's entry is appended; the lease is taken (else
// {2, the decision's audit reply}: the holder applies the claim); the
// checkpoint is saved as saveLua does, with the save's entries (else {3,
// the decision's audit reply, three nils, the claims' values}: the claim
// and the lease stand). It returns {1, the decision's audit reply, the
// save's, "answered", the claims' values} when it saved: one flat list,
// each audit reply three values (nils when nothing was appended), as a
// script's reply costs Redis more for each table it holds. "answered",
// which the script reads anyway, is returned whether or not it is asked
// for: a value in the reply costs Redis less than a key to read sent.
//
// One read of the claims hash brings the head, the claim, the
// deliveries and the claims to read; the deliveries and the claim are
// written in one command with the head the save writes (save_write's
// more), or on their own on the ways out before it: the script runs
// alone, so a field it read unset is still unset when it writes.
//
// Sent again after its answer was lost (go-redis does that on a cut or
// a read timeout), the script finds the head moved on: when the head is
// this save's checkpoint ID, the claim holds this decision's value and
// the lease this save's token, that is its own first attempt, and it
// returns that attempt's {1, ...}, having written nothing, with the
// audit replies of what that attempt appended (audit_had): the run goes
// on, and its call is sent once, rather than being taken for a crash.
const claimSaveLua = auditAppendLua + auditFlushLua + saveCheckpointLua + `
-- Counts are compared with their usual values before they are
-- converted: tonumber costs Redis about a thousand instructions.
local m = ARGV[19]
m = m == '1' and 1 or m == '0' and 0 or tonumber(m)
local ai = 20 + m
local a = ARGV[ai]
a = a == '5' and 5 or a == '0' and 0 or tonumber(a)
local bi = ai + 1 + a
local b = ARGV[bi]
b = b == '4' and 4 or b == '5' and 5 or b == '0' and 0 or tonumber(b)
-- The save's block follows the decision's, whose last hash it is
-- chained to: that hash is not sent again (audit_append's prev). The
-- save's block is then read from ARGV[bi], its count, which stands in
-- for the hash it does not hold.
local bj, bprev = bi + 1, nil
if a > 0 then bj, bprev = bi, ARGV[ai + a - 1] end
local ki = bi + 1 + b
local k = ARGV[ki]
k = k == '1' and 1 or k == '0' and 0 or tonumber(k)
-- The head's ID, "answered", the claim, the deliveries and the claims to
-- read, then the rest of the head, for save_check.
-- Tables built here are made with room for what they usually hold
-- (false in each slot, counted apart): a table that grows is rehashed
-- at each doubling, at a cost of several hundred instructions.
local fields = {'` + headID + `', 'answered', ARGV[12], false, false, false, false, false}
local nf = 3
for i = 20, 19 + m do nf = nf + 1; fields[nf] = ARGV[i] end
local ri = nf
for i = ki + 1, ki + k do nf = nf + 1; fields[nf] = ARGV[i] end
fields[nf + 1], fields[nf + 2], fields[nf + 3] = '` + headSeq + `', '` + headLen + `', '` + headExp + `'
local h = redis.call('HMGET', KEYS[4], unpack(fields, 1, nf + 3))
local head = h[1]
local known = head ~= false
if not known then head = redis.call('HGET', KEYS[1], 'id') end
local reply = {1, false, false, false, false, false, false, false}
if head ~= ARGV[10] then
  -- The head is this save's checkpoint, the claim this decision's and
  -- the lease this save's token: the script is sent again after its
  -- first attempt's answer was lost, and answers as that attempt did,
  -- having written nothing more.
  if head ~= ARGV[9] or h[3] ~= ARGV[13] or redis.call('GET', KEYS[5]) ~= ARGV[8] then
    return {-1}
  end
  ` + auditHadLua + `
  if a > 0 then reply[2], reply[3], reply[4] = audit_had(KEYS[7], KEYS[8], ARGV, ai + 1) end
  if b > 0 then reply[5], reply[6], reply[7] = audit_had(KEYS[7], KEYS[8], ARGV, bj) end
  reply[8] = h[2]
  for j = ri + 1, nf do reply[8 + j - ri] = h[j] end
  return reply
end
-- What the claims hash gets, as field, value, ...: the deliveries not
-- recorded yet, "answered" if it grows, and (once it is known to be
-- this decision's) the claim.
local set, ns = {false, false, false, false, false, false, false, false}, 0
for j = 4, ri do
  if not h[j] then
    set[ns + 1], set[ns + 2] = fields[j], '1'
    ns = ns + 2
  end
end
local answered, an = h[2], ARGV[18]
if an ~= '' and answered ~= an and (not answered or (tonumber(answered) or -1) < tonumber(an)) then
  answered = an
  set[ns + 1], set[ns + 2] = 'answered', an
  ns = ns + 2
end
if ARGV[15] ~= '' then
  redis.call('ZADD', KEYS[6], 'LT', ARGV[15], ARGV[14])
end
if h[3] then
  if ns > 0 then
    redis.call('HSET', KEYS[4], unpack(set, 1, ns))
    if not known and redis.call('PTTL', KEYS[4]) < 0 then
      redis.call('PEXPIRE', KEYS[4], math.max(ARGV[6] + 0, redis.call('PTTL', KEYS[1])))
    end
  end
  return {0, h[3]}
end
set[ns + 1], set[ns + 2] = ARGV[12], ARGV[13]
ns = ns + 2
if not known then
  -- A head kept by an earlier version: the claims hash may have no
  -- expiry yet. Written now, with the one it gets.
  redis.call('HSET', KEYS[4], unpack(set, 1, ns))
  if redis.call('PTTL', KEYS[4]) < 0 then
    redis.call('PEXPIRE', KEYS[4], math.max(ARGV[6] + 0, redis.call('PTTL', KEYS[1])))
  end
  set = nil
end
-- The decision's entry leaves the audit head's write to the save's
-- entries, which follow it in the chain (audit_append's lazy): one write
-- of the head for both, or audit_flush on the ways out before them.
if a > 0 then reply[2], reply[3], reply[4] = audit_append(KEYS[7], KEYS[8], ARGV[17], ARGV, ai + 1, b > 0) end
if not redis.call('SET', KEYS[5], ARGV[8], 'NX', 'PX', ARGV[16]) then
  if set then redis.call('HSET', KEYS[4], unpack(set, 1, ns)) end
  audit_flush()
  return {2, reply[2], reply[3], reply[4]}
end
-- "answered" and the claims to read, as they are once the deliveries
-- and the claim are written.
reply[8] = answered
for j = ri + 1, nf do
  local f, v = fields[j], h[j]
  if f == ARGV[12] then
    v = ARGV[13]
  elseif f == 'answered' then
    v = answered
  elseif not v then
    for r = 4, ri do
      if fields[r] == f then v = '1' end
    end
  end
  reply[8 + j - ri] = v
end
-- The lease holds this save's fence, just set: save_check reads neither
-- it nor the head again. It runs no command then unless the head lacks
-- its seq or journal length (kept by an earlier version): the pending
-- audit head is written before those.
local held = {h[nf + 1], h[1], h[nf + 2], h[nf + 3]}
if not (held[1] and held[3]) then audit_flush() end
local saved, left, moved, kept = save_check(KEYS, ARGV, nil, held)
if saved ~= 1 then
  if set then redis.call('HSET', KEYS[4], unpack(set, 1, ns)) end
  audit_flush()
  reply[1] = 3
  return reply
end
if b > 0 then reply[5], reply[6], reply[7] = audit_append(KEYS[7], KEYS[8], ARGV[17], ARGV, bj, false, bprev) end
save_write(KEYS, ARGV, ki + 1 + k, left, moved, kept, set, ns)
return reply
`
