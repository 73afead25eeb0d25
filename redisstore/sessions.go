package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/runner"
)

// The calls below let the runner begin its work on a thread, claim a
// decision and end its work in one round trip each: each is one Lua
// script that writes, with the thread's own keys, the records that belong
// to the same step — the wake-up schedule, the waiting count, the audit
// stream. Those three are keys of their own, outside the thread's hash
// slot, so on Redis Cluster the script does the thread's part and they
// are written by separate commands, in the order that keeps the same
// guarantees (a decision's wake-up is written before its claim), and
// guarded where order alone cannot be had: the wake-up and the waiting
// count are written on behalf of the lease's acquisition, and a later
// acquisition's wins (setWakeup, setWaitingFor). A claim that takes the lease then writes its wake-up a
// second time, as that acquisition's: one more round trip.
//
// A run's last save may end the session instead of CloseThread
// (saveClosing): on a single server only, where its script can write the
// schedule, the waiting count, the audit entries and the inbox with the
// checkpoint. The deliveries the session then shows are recorded without
// the lease (recordLua, or with OpenThread and ClaimDecision): set-once
// records and a count that only grows need none.

var _ runner.Sessions = (*Store)(nil)

// OpenThread implements runner.Sessions: it acquires the lease with a
// new token, moves the wake-up and reads the head's ID and the claims
// asked for.
func (s *Store) OpenThread(ctx context.Context, o runner.Opening) (runner.Opened, error) {
	k, err := s.leaseKey(o.Thread, o.Owner, o.TTL)
	if err != nil {
		return runner.Opened{}, fmt.Errorf("open thread: %w", err)
	}
	tk, _ := s.keys(o.Thread)
	keys := []string{k, tk.head, tk.claims, tk.fence}
	cluster := s.isCluster()
	if !cluster {
		keys = append(keys, s.wakeups)
	}
	if err := checkClaimKeys(o.Record...); err != nil {
		return runner.Opened{}, fmt.Errorf("open thread: %w", err)
	}
	args := make([]any, 0, 9+len(o.Record)+len(o.Keys))
	token := runner.NewLeaseToken(o.Owner)
	args = append(args, token, o.TTL.Milliseconds(), unixMs(o.WakeIfHeld), unixMs(o.WakeIfBusy), o.Thread,
		s.fenceTTL(o.TTL))
	args = s.recordArgs(args, o.Record, o.Answered)
	for _, key := range o.Keys {
		args = append(args, key)
	}
	res, err := s.eval(ctx, s.openScript, openLua, keys, args).Slice()
	if err != nil {
		return runner.Opened{}, fmt.Errorf("open thread %s: %w", o.Thread, err)
	}
	if len(res) != 3+len(o.Keys) {
		return runner.Opened{}, fmt.Errorf("open thread %s: unexpected reply %v", o.Thread, res)
	}
	out := runner.Opened{Held: res[0] == int64(1)}
	if out.Held {
		out.Token = token
	}
	out.Head, _ = res[1].(string)
	out.Claims = claimValues(o.Keys, res[3:])
	if cluster {
		switch seq, _ := res[2].(string); {
		case out.Held && !o.WakeIfHeld.IsZero():
			// Recorded as this acquisition's, so that a close of an
			// earlier one that arrives late leaves it alone.
			if _, err := s.setWakeup(ctx, o.Thread, seq, o.WakeIfHeld, true); err != nil {
				return out, err
			}
		case !out.Held && !o.WakeIfBusy.IsZero():
			if err := s.WakeBy(ctx, o.Thread, o.WakeIfBusy); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// CloseThread implements runner.Sessions: it records deliveries, sets the
// schedule and the waiting count if c.Token still holds the lease,
// releases it and reads back the claims asked for.
//
// A token that no longer holds the lease leaves the schedule alone: the
// thread may have been taken and scheduled since, and the wake-up this
// session set when it began is still there to have the thread looked at
// again. On a single server the check and the writes are one script. On
// a cluster the schedule and the waiting count are in other slots and
// are written after the lease is released, so another process may take
// the thread and set its own before these writes arrive: each is made on
// behalf of this acquisition's number, which loses to that of any later
// one (setWaitingFor, setWakeup).
func (s *Store) CloseThread(ctx context.Context, c runner.Closing) (map[string][]byte, error) {
	keys, args, err := s.closeCall(c)
	if err != nil {
		return nil, err
	}
	cluster := s.isCluster()
	var res any
	var inboxErr error
	if c.Inbox != nil {
		res, err = s.closeWithInbox(ctx, keys, args, c.Inbox)
		if res != nil {
			inboxErr, err = err, nil
		}
	} else {
		res, err = s.runScript(ctx, s.closeScript, closeLua, keys, args...).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("close thread %s: %w", c.Thread, err)
	}
	reply, _ := res.([]any)
	if len(reply) != 3 {
		return nil, fmt.Errorf("close thread %s: unexpected reply %v", c.Thread, res)
	}
	if len(c.Audit) > 0 {
		if err := s.auditAfter(ctx, reply[1], c.Audit...); err != nil {
			return nil, err
		}
	}
	if seq, held := reply[2].(string); cluster && c.Schedule && held {
		if _, err := s.setWakeup(ctx, c.Thread, seq, c.Wake, false); err != nil {
			return nil, err
		}
	}
	if inboxErr != nil {
		inboxErr = fmt.Errorf("%w: %w", runner.ErrInboxNotUpdated, inboxErr)
	}
	return claimValues(c.Keys, reply[0]), inboxErr
}

// closeCall returns closeLua's keys and arguments for c.
func (s *Store) closeCall(c runner.Closing) ([]string, []any, error) {
	lease, err := s.leaseKey(c.Thread, c.Token, time.Millisecond)
	if err == nil {
		err = checkClaimKeys(c.Record...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("close thread: %w", err)
	}
	tk, _ := s.keys(c.Thread)
	keys := []string{lease, tk.claims, tk.head, tk.fence}
	cluster := s.isCluster()
	if !cluster {
		keys = append(keys, s.wakeups, s.auditStream, s.auditHead)
	}
	var audit []any
	if !cluster && len(c.Audit) > 0 {
		if audit, err = s.auditBlock(c.Audit); err != nil {
			return nil, nil, fmt.Errorf("close thread %s: %w", c.Thread, err)
		}
	}
	schedule := ""
	if c.Schedule {
		schedule = "0" // and no waiting count: the inbox holds the waiting calls (waiting.go)
		if !c.Wake.IsZero() {
			schedule = strconv.FormatInt(c.Wake.UnixMilli(), 10)
		}
	}
	answered := ""
	if c.Answered >= 0 {
		answered = strconv.Itoa(c.Answered)
	}
	args := make([]any, 0, 10+len(c.Record)+len(audit)+len(c.Keys))
	args = append(args, c.Token, s.ttl.Milliseconds(), c.Thread, answered, schedule, len(c.Record))
	for _, key := range c.Record {
		args = append(args, key)
	}
	args = append(args, len(audit))
	if len(audit) > 0 {
		args = append(args, s.auditMinID()) // no entries, no trim: not sent
	}
	args = append(args, audit...)
	for _, key := range c.Keys {
		args = append(args, key)
	}
	return keys, args, nil
}

// saveClosing is Save of a run's last save that also ends the session
// (runner.LastSave), on a single server: one script checks and writes the
// checkpoint as saveLua does and, if it saved, writes the inbox update,
// then CloseThread's work for l.Closing — the schedule, the waiting
// count, the audit entries, the release of the lease (which the save's
// fence check has just found held) and the read of the claims asked for.
// saveArgs are saveLua's first eleven arguments. With f, it is a
// start's first save (firstSave), which takes the lease instead of
// checking a fence and hands over the kept replies.
func (s *Store) saveClosing(ctx context.Context, cp *graph.Checkpoint, k threadKeys, saveArgs []any, l *runner.LastSave, f *runner.FirstSave) (int, error) {
	c := l.Closing
	ckeys, cargs, err := s.closeCall(c)
	if err != nil {
		return 0, err
	}
	// On a single server the close touches no fence: its keys are the
	// wakeups and, if it appends entries, the audit stream and head.
	keys := make([]string, 0, 10)
	keys = append(keys, k.head, k.journal, k.history, k.claims, k.lease, ckeys[4])
	if f != nil {
		keys = append(keys, s.keptKey(cp.Thread))
	}
	if len(c.Audit) > 0 {
		keys = append(keys, ckeys[5:7]...)
	}
	var ikeys []string
	var iargs []any
	if c.Inbox != nil {
		if c.Inbox.Thread != c.Thread {
			// The script sends the thread once, for both.
			return 0, fmt.Errorf("update inbox of %s with the close of %s: the threads differ", c.Inbox.Thread, c.Thread)
		}
		if ikeys, iargs, err = s.inboxArgs(c.Inbox); err != nil {
			return 0, fmt.Errorf("update inbox: %w", err)
		}
	}
	keys = append(keys, ikeys...)
	args := make([]any, 0, len(saveArgs)+1+len(cargs)+len(iargs)+3+len(cp.Journal))
	args = append(args, saveArgs...)
	script, src := s.saveCloseScript, saveCloseLua
	if f != nil {
		// A start's first save: it takes the lease with f.Token and
		// hands over the kept replies after the list (firstsave.go).
		args = append(args, f.Token)
		script, src = s.firstSaveCloseScript, firstSaveCloseLua
	}
	args = append(args, len(c.Keys)) // which, with the counts among them, tells where they end
	// Not the lease token (the save's fence, or f.Token) nor the claims'
	// expiry (the save's); not the inbox's thread (the close's).
	args = append(args, cargs[2:]...)
	if len(iargs) > 0 {
		args = append(args, iargs[1:]...)
	}
	for _, e := range cp.Journal {
		args = append(args, []byte(e))
	}
	sent := time.Now()
	res, err := s.runScript(ctx, script, src, keys, args...).Slice()
	if err != nil {
		return 0, err
	}
	if len(res) == 1 {
		saved, _ := res[0].(int64)
		return int(saved), nil
	}
	var watchers int64
	if len(res) >= 6 {
		watchers, _ = res[5].(int64)
	}
	end := 6 + int(watchers) + len(c.Keys) // the claims' values end there
	tail := 0
	if f != nil && len(res) > end {
		// The number of kept replies, then those replies.
		n, _ := res[end].(int64)
		tail = 1 + int(n)
	}
	if len(res) != end+tail || res[0] != int64(1) || (f != nil && tail == 0) {
		return 0, fmt.Errorf("unexpected reply %v", res)
	}
	if f != nil {
		f.Took(sent, keptReplies(res[end+1:]))
	}
	// The checkpoint is saved and the lease let go: what follows is the
	// session's, and fails it alone.
	var inboxErr error
	if c.Inbox != nil {
		inboxErr = s.replaced(c.Inbox, []any{res[4], res[6 : 6+watchers]}, nil)
	}
	if len(c.Audit) > 0 {
		if err := s.auditAfter(ctx, auditReply(res, 1), c.Audit...); err != nil && inboxErr == nil {
			inboxErr = err
		}
	}
	l.Closed(claimValues(c.Keys, res[6+watchers:end]), inboxErr)
	return 1, nil
}

// ClaimDecision implements runner.Sessions: Claim with the thread's
// wake-up written first and, when the claim is won, the audit record and
// (if asked) the lease, in one step; ErrStale, having written nothing, if
// the head is no longer checkpoint c.ExpectHead.
func (s *Store) ClaimDecision(ctx context.Context, c runner.DecisionClaim) (runner.Claimed, error) {
	tk, err := s.keys(c.Thread)
	if err == nil {
		err = checkClaimKeys(append([]string{c.Key}, c.Record...)...)
	}
	if err != nil {
		return runner.Claimed{}, fmt.Errorf("claim %s: %w", c.Key, err)
	}
	keys := []string{tk.claims, tk.head, tk.lease, tk.fence}
	cluster := s.isCluster()
	if !cluster {
		keys = append(keys, s.wakeups, s.auditStream, s.auditHead)
	} else if !c.WakeBy.IsZero() {
		if err := s.WakeBy(ctx, c.Thread, c.WakeBy); err != nil {
			return runner.Claimed{}, fmt.Errorf("claim %s: %w", c.Key, err)
		}
	}
	leaseMs, token := int64(0), ""
	if c.LeaseOwner != "" && c.LeaseTTL >= time.Millisecond {
		leaseMs, token = c.LeaseTTL.Milliseconds(), runner.NewLeaseToken(c.LeaseOwner)
	}
	var audit []any
	if !cluster && c.Audit != nil {
		if audit, err = s.auditBlock([]map[string]string{c.Audit}); err != nil {
			return runner.Claimed{}, fmt.Errorf("claim %s: %w", c.Key, err)
		}
	}
	args := make([]any, 0, 14+len(c.Record)+len(audit)+len(c.Keys))
	args = append(args, c.Key, c.Value, s.ttl.Milliseconds(), c.ExpectHead, c.Thread, unixMs(c.WakeBy), s.auditMinID(),
		token, leaseMs, s.fenceTTL(c.LeaseTTL))
	args = s.recordArgs(args, c.Record, c.Answered)
	args = append(args, len(audit))
	args = append(args, audit...)
	for _, k := range c.Keys {
		args = append(args, k)
	}
	res, err := s.runScript(ctx, s.claimDecisionScript, claimDecisionLua, keys, args...).Slice()
	if err != nil {
		return runner.Claimed{}, fmt.Errorf("claim %s in %s: %w", c.Key, c.Thread, err)
	}
	switch {
	case len(res) > 0 && res[0] == int64(-1):
		return runner.Claimed{}, fmt.Errorf("claim %s in %s: %w", c.Key, c.Thread, runner.ErrStale)
	case len(res) >= 7 && res[0] == int64(1):
		out := runner.Claimed{Winner: c.Value, Won: true, Leased: res[1] == int64(1)}
		if out.Leased {
			out.Token = token
			out.Head, _ = res[2].(string)
			out.Claims = claimValues(c.Keys, res[7:])
			if err := s.leasedWakeBy(ctx, c.Thread, res[3], c.WakeBy); err != nil {
				return out, fmt.Errorf("claim %s in %s: %w", c.Key, c.Thread, err)
			}
		}
		if c.Audit != nil {
			if err := s.auditAfter(ctx, auditReply(res, 4), c.Audit); err != nil {
				return out, err
			}
		}
		return out, nil
	case len(res) == 2:
		if stored, ok := res[1].(string); ok {
			return runner.Claimed{Winner: []byte(stored)}, nil
		}
	}
	return runner.Claimed{}, fmt.Errorf("claim %s in %s: unexpected reply %v", c.Key, c.Thread, res)
}

// leasedWakeBy writes again, on a cluster, the wake-up written before a
// claim that then took the thread's lease, this time on behalf of that
// acquisition (seq, the script's reply): a close of an earlier one that
// arrived in between may have moved it later, and one that arrives after
// must not.
func (s *Store) leasedWakeBy(ctx context.Context, thread string, seq any, at time.Time) error {
	n, ok := seq.(string)
	if !ok || at.IsZero() || !s.isCluster() {
		return nil
	}
	_, err := s.setWakeup(ctx, thread, n, at, true)
	return err
}

// auditAfter finishes the audit entries a script was given: it learns
// the head from the script's reply, and appends the entries on their own
// if the script did not (the head had moved, or on a cluster the script
// was not given them).
func (s *Store) auditAfter(ctx context.Context, reply any, records ...map[string]string) error {
	if reply != nil {
		appended, err := s.learnAuditHead(reply)
		if err != nil || appended {
			return err
		}
	}
	return s.AuditAll(ctx, records)
}

// recordArgs appends the arguments of record_deliveries (recordLua):
// the claims' expiry, the answered count (or ""), the number of records
// and the records.
func (s *Store) recordArgs(args []any, record []string, answered int) []any {
	n := ""
	if answered > 0 {
		n = strconv.Itoa(answered)
	}
	args = append(args, s.ttl.Milliseconds(), n, len(record))
	for _, key := range record {
		args = append(args, key)
	}
	return args
}

// ClaimValues implements runner.Sessions: the thread's claims of keys
// (those set), in one HMGET. When this process wrote to the thread
// without its replicas acknowledging it (Options.Replicas; a claim that
// failed with ErrNotReplicated, or whose answer was lost), it reads them
// only as its replicas have them: with a WAIT, failing with
// ErrNotReplicated while they do not acknowledge (replicas.go). What a
// person is told of a claim read back is then what a failover keeps.
func (s *Store) ClaimValues(ctx context.Context, thread string, keys []string) (map[string][]byte, error) {
	k, err := s.keys(thread)
	if err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	if len(keys) == 0 {
		return map[string][]byte{}, nil
	}
	if s.replicas > 0 && s.unsynced.has(hashTag(k.claims), time.Now()) {
		args := make([]any, len(keys))
		for i, key := range keys {
			args[i] = key
		}
		vals, err := s.runScript(ctx, syncedClaimsScript, syncedClaimsLua, []string{k.claims, s.syncKey(hashTag(k.claims))}, args...).Slice()
		if err != nil {
			return nil, fmt.Errorf("claims of %s: %w", thread, err)
		}
		return claimValues(keys, vals), nil
	}
	vals, err := s.rdb.HMGet(ctx, k.claims, keys...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("claims of %s: %w", thread, err)
	}
	return claimValues(keys, vals), nil
}

// claimValues pairs keys with a reply's values, leaving out those unset.
func claimValues(keys []string, reply any) map[string][]byte {
	vals, _ := reply.([]any)
	out := make(map[string][]byte, len(keys))
	for i, key := range keys {
		if i < len(vals) {
			if v, ok := vals[i].(string); ok {
				out[key] = []byte(v)
			}
		}
	}
	return out
}

func (s *Store) isCluster() bool {
	_, ok := s.rdb.(*redis.ClusterClient)
	return ok
}

func unixMs(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// openLua begins work on a thread.
//
//	KEYS: lease, head, claims, fence[, wakeups]
//	ARGV: lease token, lease ms, wake-up if acquired (unix ms or ''), wake-up if
//	      not, thread, fence ms, record_deliveries' arguments (claims
//	      expiry ms, answered count or "", the number n of records, the n
//	      records), then the claim keys to read
//
// It records the deliveries first, whether or not it takes the lease.
// It returns {1 if the lease was acquired else 0, the head's checkpoint
// ID or nil, the acquisition's number or nil, then the claims' values}:
// one list, as a script's reply costs Redis more for each table it holds. The
// number orders writes of the schedule on a cluster (setWakeup): a single
// server writes it in this script, and neither takes nor returns one.
const openLua = acquiredLua + headLua + recordFnLua + `
-- One read of the claims hash first: the head's ID, "answered" and the
-- claims to read back (recorded_values).
local first = 10 + tonumber(ARGV[9])
local fields = {'` + headID + `', 'answered'}
for i = first, #ARGV do fields[#fields + 1] = ARGV[i] end
local h = redis.call('HMGET', KEYS[3], unpack(fields))
local hid = h[1]
record_deliveries(KEYS[3], KEYS[2], ARGV, 7, hid, h[2])
local held = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
local seq = false
if held and not KEYS[5] then seq = acquired(KEYS[4], ARGV[6]) end
local wake = ARGV[4]
if held then wake = ARGV[3] end
if KEYS[5] and wake ~= '' then
  redis.call('ZADD', KEYS[5], 'LT', wake, ARGV[5])
end
if not hid then hid = redis.call('HGET', KEYS[2], 'id') end
local reply = {held and 1 or 0, hid, seq}
recorded_values(reply, 3, fields, h, ARGV, 7)
return reply
`

// closeLua ends work on a thread.
//
//	KEYS: lease, claims, head, fence[, wakeups, audit stream, audit head]
//	ARGV: lease token, claims expiry ms, thread, answered count or '',
//	      wake-up (unix ms, '0' to forget, '' to leave), the number n of
//	      deliveries to record, those claim keys, the number a of audit
//	      arguments, the audit minimum ID (only if a > 0: a close that
//	      appends nothing trims nothing), then a arguments (audit_append's
//	      block), then the claim keys to read
//
// Deliveries are set-once claims with the value "1"; "answered" only
// grows. The wake-up is written only if the token still holds the lease
// (the waiting count an earlier version kept is not written: the inbox
// holds the waiting calls, waiting.go). It returns {the values of the keys to read,
// after the lease is released; audit_append's reply or nil; on a cluster
// (no wakeups key), the number of the token's acquisition if it held the
// lease ('0' if its fence key is gone: it then loses to any numbered
// one), else nil}.
const closeLua = auditAppendLua + closeThreadLua + closeReplyLua + `
return close_reply(close_thread(KEYS, ARGV, 0))
`

// closeThreadLua is closeLua's work as a Lua function of its keys and
// arguments, which closeInboxLua and saveCloseLua share:
// close_thread(KEYS, A, o, held, vals, free, ttl) reads closeLua's
// argument n at A[o + n], so that a script that carries them among its
// own passes its ARGV and where they begin rather than a copy; given
// ttl, it takes that for the claims' expiry, which is then not read (a
// save that closes sends the thread's expiry once, for both). Given vals
// (the claims to read, read by the caller), it returns those; else it
// reads them from where the audit block ends to the end of A. It returns the claims'
// values, audit_append's three values (false if it appended nothing)
// and the acquisition's number (or false): values, not tables, which
// close_reply (closeReplyLua) puts in closeLua's reply. Given free (the caller
// found the lease key missing, as a start's first save may), it has no
// lease to delete.
const closeThreadLua = `
local function close_thread(KEYS, A, o, held, vals, free, ttl)
  if held == nil then held = redis.call('GET', KEYS[1]) == A[o + 1] end
  local seq = false
  if held and not KEYS[5] then seq = redis.call('GET', KEYS[4]) or '0' end
  local claims, thread = KEYS[2], A[o + 3]
  -- Counts are compared with their usual values before they are
  -- converted (tonumber costs Redis about a thousand instructions).
  local n = A[o + 6]
  n = n == '0' and 0 or tonumber(n)
  local wrote = false
  for i = o + 7, o + 6 + n do
    if redis.call('HSETNX', claims, A[i], '1') == 1 then wrote = true end
  end
  local answered = A[o + 4]
  if answered ~= '' and (tonumber(redis.call('HGET', claims, 'answered')) or -1) < tonumber(answered) then
    redis.call('HSET', claims, 'answered', answered)
    wrote = true
  end
  if wrote then
    if redis.call('PTTL', claims) < 0 then
      redis.call('PEXPIRE', claims, math.max(tonumber(ttl or A[o + 2]), redis.call('PTTL', KEYS[3])))
    end
  end
  local wake = A[o + 5]
  if held and KEYS[5] and wake ~= '' then
    if wake == '0' then
      redis.call('ZREM', KEYS[5], thread)
    else
      redis.call('ZADD', KEYS[5], wake, thread)
    end
  end
  -- The audit block's count, then (if it is not 0) the minimum ID and
  -- the block; the claims to read follow from r on.
  local a = A[o + 7 + n]
  a = a == '0' and 0 or a == '5' and 5 or tonumber(a)
  local appended, hash, aseq = false, false, false
  local r = o + 8 + n
  if a > 0 then
    r = r + 1 + a
    if KEYS[6] then
      appended, hash, aseq = audit_append(KEYS[6], KEYS[7], A[o + 8 + n], A, o + 9 + n)
    end
  end
  if held and not free then redis.call('DEL', KEYS[1]) end
  if not vals then
    vals = {}
    if #A >= r then vals = redis.call('HMGET', claims, unpack(A, r, #A)) end
  end
  return vals, appended, hash, aseq, seq
end
`

// closeReplyLua defines close_reply(...), closeLua's reply of
// close_thread's values, for the scripts that reply as closeLua does.
const closeReplyLua = `
local function close_reply(vals, appended, hash, aseq, seq)
  local audited = false
  if appended then audited = {appended, hash, aseq} end
  return {vals, audited, seq}
end
`

// claimDecisionLua claims a decision.
//
//	KEYS: claims, head, lease, fence[, wakeups, audit stream, audit head]
//	ARGV: claim key, value, expiry ms, expected head ID or '', thread,
//	      wake-up (unix ms or ''), audit minimum ID, lease token or '',
//	      lease ms, fence ms, record_deliveries' arguments (expiry ms,
//	      answered count or '', the number m of records, the m records),
//	      the number n of audit arguments, then n arguments
//	      (audit_append's block), then the claim keys to read if the
//	      lease is taken
//
// The deliveries are recorded once the head is found to be the expected
// one, whoever wins the claim.
// It returns {-1} when the head is not the expected one (nothing
// written), {0, the stored value} when the claim was someone else's, and
// {1, 1 if it took the lease else 0, the head's ID, the acquisition's
// number (on a cluster; else nil), audit_append's three values (nil if it
// appended nothing), then the claims' values} when this call set the
// claim.
const claimDecisionLua = auditAppendLua + acquiredLua + headLua + recordFnLua + `
-- One read of the claims hash first: the head's ID, "answered" and the
-- claims to read back if the lease is taken (recorded_values).
local m = tonumber(ARGV[13])
local at = 14 + m
local n = tonumber(ARGV[at])
local fields = {'` + headID + `', 'answered'}
for i = at + 1 + n, #ARGV do fields[#fields + 1] = ARGV[i] end
local h = redis.call('HMGET', KEYS[1], unpack(fields))
local head = h[1]
local known = head ~= false
if ARGV[4] ~= '' then
  if not known then head = redis.call('HGET', KEYS[2], 'id') end
  if head ~= ARGV[4] then return {-1} end
end
record_deliveries(KEYS[1], KEYS[2], ARGV, 11, known, h[2])
if KEYS[5] and ARGV[6] ~= '' then
  redis.call('ZADD', KEYS[5], 'LT', ARGV[6], ARGV[5])
end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return {0, redis.call('HGET', KEYS[1], ARGV[1])}
end
if not known and redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[3]), redis.call('PTTL', KEYS[2])))
end
local appended, hash, aseq = false, false, false
if KEYS[6] and n > 0 then
  appended, hash, aseq = audit_append(KEYS[6], KEYS[7], ARGV[7], ARGV, at + 1)
end
if ARGV[8] == '' or tonumber(ARGV[9]) <= 0 then return {1, 0, false, false, appended, hash, aseq} end
if not redis.call('SET', KEYS[3], ARGV[8], 'NX', 'PX', ARGV[9]) then return {1, 0, false, false, appended, hash, aseq} end
local seq = false
if not KEYS[5] then seq = acquired(KEYS[4], ARGV[10]) end
if not head then head = head_id(KEYS[1], KEYS[2]) end
local reply = {1, 1, head, seq, appended, hash, aseq}
recorded_values(reply, 7, fields, h, ARGV, 11, ARGV[1], ARGV[2])
return reply
`

// recordFnLua defines record_deliveries(claims, head, a, i, known),
// which writes deliveries shown: from a[i] on, the claims' expiry ms, the
// answered count or "", the number n of records and the n records. Each
// record is a set-once claim with the value "1"; "answered" only grows.
// A claims hash without an expiry gets the head's (or the given one, if
// longer). known says the caller found the head in the claims hash: a
// hash that holds the head has an expiry (the first save gave it one, and
// nothing takes it away), so none is read; answered, if not nil, is the
// stored count the caller read (false: none). It returns the index in a
// that follows its arguments.
//
// recorded_values(out, at, fields, h, a, i, key, value) puts in out[at +
// 1], … what the claims fields[3], … hold after
// record_deliveries(claims, head, a, i, …) and,
// if key is given, the claim of key set to value, given h, what an
// HMGET of fields read before them (fields[2] is "answered"): they write
// no other field of the hash, deliveries are set once to "1" and
// "answered" only grows. A script that reads the claims it returns with
// the head, before it writes, so reads the hash once.
const recordFnLua = `
local function recorded_values(out, at, fields, h, a, i, key, value)
  local answered = h[2]
  if a[i + 1] ~= '' and (tonumber(answered) or -1) < tonumber(a[i + 1]) then answered = a[i + 1] end
  local recorded = {}
  for j = i + 3, i + 2 + tonumber(a[i + 2]) do recorded[a[j]] = true end
  for j = 3, #fields do
    local f, v = fields[j], h[j]
    if f == key then
      v = value
    elseif f == 'answered' then
      v = answered
    elseif not v and recorded[f] then
      v = '1'
    end
    out[at + j - 2] = v
  end
end

local function record_deliveries(claims, head, a, i, known, answered)
  local n = tonumber(a[i + 2])
  local wrote = false
  for j = i + 3, i + 2 + n do
    if redis.call('HSETNX', claims, a[j], '1') == 1 then wrote = true end
  end
  if a[i + 1] ~= '' and answered == nil then answered = redis.call('HGET', claims, 'answered') end
  if a[i + 1] ~= '' and (tonumber(answered) or -1) < tonumber(a[i + 1]) then
    redis.call('HSET', claims, 'answered', a[i + 1])
    wrote = true
  end
  if wrote and not known and redis.call('PTTL', claims) < 0 then
    redis.call('PEXPIRE', claims, math.max(tonumber(a[i]), redis.call('PTTL', head)))
  end
  return i + 3 + n
end
`

// recordLua records deliveries made after a session ended.
//
//	KEYS: claims, head[, wakeups]
//	ARGV: thread, the wake-up to replace (unix ms, '' to leave the
//	      schedule alone), the one to put instead (unix ms, '0' for none),
//	      then record_deliveries' arguments
//
// The wake-up is replaced only if the thread's is still the one named: a
// later step's is left alone. On a cluster (no wakeups key) moveWakeLua
// does that part. One read of the claims hash brings "answered" and
// whether the hash holds the head, which tells that it has its expiry
// (record_deliveries' known).
const recordLua = recordFnLua + moveWakeFnLua + `
if ARGV[5] ~= '' or ARGV[6] ~= '0' then
  local h = redis.call('HMGET', KEYS[1], 'answered', '` + headSeq + `')
  record_deliveries(KEYS[1], KEYS[2], ARGV, 4, h[2] ~= false, h[1])
end
if KEYS[3] then move_wake(KEYS[3], ARGV[1], ARGV[2], ARGV[3]) end
return 1
`

// moveWakeLua replaces a thread's wake-up if it is still the one named.
//
//	KEYS: wakeups
//	ARGV: thread, the wake-up to replace (unix ms), the one to put
//	      instead (unix ms, '0' for none)
const moveWakeLua = moveWakeFnLua + `
move_wake(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
return 1
`

const moveWakeFnLua = `
local function move_wake(wakeups, thread, from, to)
  if from == '' or tonumber(redis.call('ZSCORE', wakeups, thread)) ~= tonumber(from) then return end
  if to == '0' then
    redis.call('ZREM', wakeups, thread)
  else
    redis.call('ZADD', wakeups, to, thread)
  end
end
`

// saveCloseLua is a run's last save that ends the session (saveClosing).
//
//	KEYS: saveLua's (head, journal, history, claims, lease), then
//	      wakeups, then the audit stream and head (only if the close
//	      appends entries), then the i keys of updateInboxLua (none
//	      without an inbox update)
//	ARGV: saveLua's first 11, the number r of claims closeLua's
//	      arguments name to read (which, with the counts among them,
//	      tells where they end), closeLua's arguments from its third
//	      (the thread) on, updateInboxLua's arguments from its second
//	      on (i + 1 of them: as many as its keys say; none without an
//	      inbox update), then the new journal entries
//
// A single server's close touches no fence key (closeLua's fence), the
// lease token is the save's fence, the claims' expiry is the save's
// (the journal, history and claims share it), the inbox's thread is the
// close's, and the inbox update's size is its keys': none is sent again.
// A close that appends no audit entry is sent neither the audit keys
// nor the minimum ID.
//
// It returns {saveLua's reply} when it did not save, else one list: {1,
// audit_append's three values (nil if it appended nothing), the inbox
// entry updateInboxLua replaced (or nil), the number w of items that
// follow of who opened the Home tab (updateInboxLua's second value; 0
// without an inbox update), those w items, then the values of the claims
// to read after the lease is let go}. A script's reply costs Redis more
// for each table it holds, and this one ends every run.
const saveCloseLua = auditAppendLua + saveCheckpointLua + closeThreadLua + updateInboxFnLua + saveCloseFnLua + `
local reply = save_close(KEYS, ARGV, 12, 7, false)
return reply
`

// saveCloseFnLua defines save_close(KEYS, ARGV, o, ka, first), the work
// of saveCloseLua whose count of claims to read is ARGV[o] (closeLua's
// arguments from the thread on follow) and whose audit keys, if sent,
// are KEYS[ka] and KEYS[ka + 1], the inbox keys after them (or from
// KEYS[ka] on, without): the arguments are read where they are.
// With first (a start's first save, firstSaveCloseLua), the save only
// creates a thread ({0} if it exists) and the session holds the lease
// without a fence to compare; first is 'free' when the lease key is
// missing (nobody took it: there is none to let go of). fresh is
// save_check's: the caller found none of the thread's keys.
const saveCloseFnLua = `
local function save_close(KEYS, ARGV, o, ka, first, fresh)
  -- Counts are compared with their usual values before they are
  -- converted (tonumber costs Redis about a thousand instructions).
  local r = ARGV[o]
  r = r == '0' and 0 or r == '1' and 1 or tonumber(r)
  -- closeLua's argument n is ARGV[b + n] from its third, the thread, on.
  -- Its first two are not sent: the lease token is the save's fence (or
  -- a first save's token), and the lease is held; the claims' expiry is
  -- the save's, ARGV[6].
  local b = o - 2
  local thread = ARGV[o + 1]
  local nrec = ARGV[b + 6]
  nrec = nrec == '0' and 0 or tonumber(nrec)
  local a = ARGV[b + 7 + nrec]
  a = a == '0' and 0 or a == '5' and 5 or tonumber(a)
  -- closeLua's arguments end with the r claims to read, after the audit
  -- minimum ID and block (neither sent without entries).
  local c = 7 + nrec + r
  local ko = ka - 1
  if a > 0 then
    c = c + 1 + a
    ko = ka + 1
  end
  -- The claims the close reads back are read with the head: the script
  -- writes none of them (it writes the head, deliveries and "answered").
  local extra = {}
  for i = b + c - r + 1, b + c do extra[#extra + 1] = ARGV[i] end
  local saved, left, moved, kept, vals = save_check(KEYS, ARGV, extra, nil, fresh)
  if (saved ~= 1 or (first and left ~= -2)) and ` + saveHeadIDLua + ` == ARGV[9] then
    -- The head is this save's checkpoint: the script is sent again
    -- after its first attempt's answer was lost. That attempt saved and
    -- closed; answer as it did, with what it appended (audit_had), the
    -- claims as they are, and no inbox entry (its watchers are not
    -- known again: their Home tabs are refreshed by the next change).
    ` + auditHadLua + `
    local reply = {1, false, false, false, false, 0}
    if a > 0 then
      reply[2], reply[3], reply[4] = audit_had(KEYS[ka], KEYS[ka + 1], ARGV, b + 9 + nrec)
    end
    if #extra > 0 then
      local h = redis.call('HMGET', KEYS[4], unpack(extra))
      for j = 1, #extra do reply[6 + j] = h[j] end
    end
    return reply, 6 + #extra
  end
  if saved ~= 1 then return {saved} end
  if first and left ~= -2 then return {0} end -- it only creates a thread
  if not vals then vals = {} end
  local ni, nu = #KEYS - ko, 0
  local old, watchers = false, nil
  if ni > 0 then
    -- updateInboxLua's arguments but the first, the thread: the close's.
    nu = ni + 1
    old, watchers = update_inbox(KEYS, ko, ni, ARGV, b + c - 1, thread)
  end
  save_write(KEYS, ARGV, b + c + nu + 1, left, moved, kept)
  local ckeys = {KEYS[5], KEYS[4], KEYS[1], false, KEYS[6], false, false}
  if a > 0 then ckeys[6], ckeys[7] = KEYS[ka], KEYS[ka + 1] end
  local _, appended, hash, aseq = close_thread(ckeys, ARGV, b, true, vals, first == 'free', ARGV[6])
  local reply = {1, false, false, false, false, 0}
  if appended then reply[2], reply[3], reply[4] = appended, hash, aseq end
  local at = 6
  if watchers then
    reply[5], reply[6] = old, #watchers
    for j = 1, #watchers do reply[at + j] = watchers[j] end
    at = at + #watchers
  end
  for j = 1, #vals do reply[at + j] = vals[j] end
  return reply, at + #vals
end
`
