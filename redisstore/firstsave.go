package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/runner"
)

// A conversation's first save takes the thread's lease (runner.FirstSave):
// the runner's start takes no lease before it runs the model. The save's
// script refuses, writing nothing, if another acquisition holds the lease
// or the thread exists; else it creates the thread, takes the lease for
// the start's token and hands over the replies kept meanwhile
// (KeepReply). A first save that also ends the session (a pause, an
// answer, a failure; on a single server) takes the lease and lets go of
// it in the same script, and writes the schedule, the audit entries and
// the inbox as saveCloseLua does; one that does not (a call's running
// save) moves the thread's wake-up no later than the opening did, so
// that a thread whose process dies is looked at again. On a cluster the
// wake-up is in another slot: it is written right after, as the
// acquisition's (setWakeup).
//
// Replies kept for a thread without a head are a list of their own in
// the thread's slot, cs:{<thread>}:kept, which expires.

// SavesTakeLease implements runner.Sessions: a save given a
// runner.FirstSave takes the start's lease.
func (s *Store) SavesTakeLease() bool { return true }

// keptKey is the key of the replies kept for a thread without a head.
func (s *Store) keptKey(thread string) string {
	return s.prefix + ":{" + escape(thread) + "}:kept"
}

// KeepReply implements runner.Sessions: it keeps reply for the thread's
// first save if the thread has no head and its lease is free. With
// Options.Replicas it waits for them as Accept does (runScript): a kept
// reply only the master has would be lost to a failover, its request let
// go of until the intake's next look, minutes later. When they do not
// acknowledge it, KeepReply fails with ErrNotReplicated and the reply is
// not taken as kept: its request stays held, and is taken up again when
// that hold lapses — answered then as any reply if the first save was
// made, kept again if not (a first save on the master that hands the
// reply over meanwhile finds its request held, and leaves it to that).
func (s *Store) KeepReply(ctx context.Context, thread string, reply []byte, ttl time.Duration) (runner.Kept, error) {
	k, err := s.keys(thread)
	if err != nil {
		return runner.NotKept, fmt.Errorf("keep reply: %w", err)
	}
	if ttl < time.Millisecond {
		return runner.NotKept, fmt.Errorf("keep reply: expiry %v is under a millisecond", ttl)
	}
	cmd := s.runScript(ctx, s.keepReplyScript, keepReplyLua, []string{k.claims, k.head, k.journal, k.history, k.lease, s.keptKey(thread)},
		reply, ttl.Milliseconds(), maxKeptReplies)
	n, err := cmd.Int()
	if v, ok := cmd.Val().(int64); ok && v != 1 && errors.Is(err, ErrNotReplicated) {
		// The script wrote nothing: what it answered stands.
		n, err = int(v), nil
	}
	if err != nil {
		return runner.NotKept, fmt.Errorf("keep reply in %s: %w", thread, err)
	}
	switch n {
	case 0:
		return runner.NotKept, nil
	case 1:
		return runner.KeptReply, nil
	}
	return runner.KeptNot, nil
}

// firstSave is Save of the checkpoint that creates the thread, for a
// start whose first save takes the lease (f). saveArgs are saveLua's
// first eleven arguments. With l, the run's last save, on a single
// server, it also ends the session as saveClosing does.
func (s *Store) firstSave(ctx context.Context, cp *graph.Checkpoint, k threadKeys, saveArgs []any, f *runner.FirstSave, l *runner.LastSave) (int, error) {
	if f.Token == "" || f.TTL < time.Millisecond {
		return 0, fmt.Errorf("first save: no lease token or a lease under a millisecond")
	}
	saveArgs[7] = "" // the fence: the script checks the lease itself
	if l != nil {
		return s.saveClosing(ctx, cp, k, saveArgs, l, f)
	}
	keys := []string{k.head, k.journal, k.history, k.claims, k.lease, k.fence, s.keptKey(cp.Thread)}
	cluster := s.isCluster()
	// The audit entries that go with the save (a call's execution,
	// runner.SaveAudit) are appended in the same script on a single
	// server, as saveAuditLua does; on a cluster the runner appends them.
	sa := runner.SaveAuditOf(ctx)
	var audit []any
	if !cluster {
		keys = append(keys, s.wakeups)
		if sa != nil && len(sa.Records) > 0 {
			var err error
			if audit, err = s.auditBlock(sa.Records); err != nil {
				return 0, err
			}
			keys = append(keys, s.auditKey(), s.auditHeadKey())
		}
	}
	args := make([]any, 0, len(saveArgs)+7+len(audit)+len(cp.Journal))
	args = append(args, saveArgs...)
	args = append(args, f.Token, f.TTL.Milliseconds(), s.fenceTTL(f.TTL), cp.Thread, unixMs(f.Wake), s.auditMinID(), len(audit))
	args = append(args, audit...)
	for _, e := range cp.Journal {
		args = append(args, []byte(e))
	}
	sent := time.Now()
	res, err := s.runScript(ctx, s.firstSaveScript, firstSaveLua, keys, args...).Slice()
	if err != nil {
		return 0, err
	}
	saved, _ := res[0].(int64)
	if saved != 1 {
		return int(saved), nil
	}
	if len(res) != 4 {
		return 0, fmt.Errorf("unexpected reply %v", res)
	}
	f.Took(sent, keptReplies(res[1]))
	// The checkpoint is saved whatever became of the entries: those not
	// appended (the chain's head had moved) are the runner's to append.
	if audit != nil {
		if appended, err := s.learnAuditHead(res[3]); err == nil && appended {
			sa.Appended()
		}
	}
	if seq, ok := res[2].(string); ok && cluster && !f.Wake.IsZero() {
		// The lease is taken and the thread saved: the wake-up that has
		// it looked at again should this process die, as this
		// acquisition's.
		if _, err := s.setWakeup(ctx, cp.Thread, seq, f.Wake, true); err != nil {
			return 1, err
		}
	}
	return 1, nil
}

// keptReplies reads a script's list of kept replies.
func keptReplies(reply any) [][]byte {
	items, _ := reply.([]any)
	out := make([][]byte, 0, len(items))
	for _, item := range items {
		if v, ok := item.(string); ok {
			out = append(out, []byte(v))
		}
	}
	return out
}

// noHeadLua defines no_head(claims, head, journal, history): whether
// the thread has no head, as save_check tells a new thread.
const noHeadLua = `
local function no_head(claims, head, journal, history)
  if redis.call('HEXISTS', claims, '` + headSeq + `') == 1 then return false end
  return redis.call('EXISTS', head, journal, history) == 0
end
`

// TakeBackReply implements runner.Sessions: if the thread still has no
// head, it takes reply (as KeepReply kept it, byte for byte) out of the
// replies kept for its first save, in one step, so that a first save
// made later does not hand it over; it reports started, nothing changed,
// if the thread has a head. With Options.Replicas, a take-back the
// replicas did not acknowledge fails with ErrNotReplicated: the reply's
// request stays due, and the look is made again.
func (s *Store) TakeBackReply(ctx context.Context, thread string, reply []byte) (started bool, err error) {
	k, err := s.keys(thread)
	if err != nil {
		return false, fmt.Errorf("take back reply: %w", err)
	}
	n, err := s.runScript(ctx, takeBackReplyScript, takeBackReplyLua, []string{k.claims, k.head, k.journal, k.history, s.keptKey(thread)},
		reply).Int()
	if err != nil {
		return false, fmt.Errorf("take back reply in %s: %w", thread, err)
	}
	return n == 0, nil
}

// takeBackReplyLua takes a reply out of the kept replies of a thread that
// has no head.
//
//	KEYS: claims, head, journal, history, kept
//	ARGV: the reply
//
// It returns 0 if the thread has a head (nothing written), else 1.
const takeBackReplyLua = noHeadLua + `
if not no_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4]) then return 0 end
redis.call('LREM', KEYS[5], 0, ARGV[1])
return 1
`

var takeBackReplyScript = redis.NewScript(takeBackReplyLua)

// maxKeptReplies is how many replies a thread without a head keeps, the
// latest: a flood of replies in a thread that is not a conversation
// does not grow its key without bound.
const maxKeptReplies = 20

// keepReplyLua keeps a reply for the thread's first save (the latest
// maxKeptReplies).
//
//	KEYS: claims, head, journal, history, lease, kept
//	ARGV: the reply, expiry ms, how many to keep at most
//
// It returns 0 if the thread has a head (nothing written), 2 if it has
// none but its lease is held (nothing written), else 1: the reply is
// appended to the kept replies, which expire after the expiry.
const keepReplyLua = noHeadLua + `
if not no_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4]) then return 0 end
if redis.call('EXISTS', KEYS[5]) == 1 then return 2 end
if redis.call('RPUSH', KEYS[6], ARGV[1]) > tonumber(ARGV[3]) then
  redis.call('LTRIM', KEYS[6], -tonumber(ARGV[3]), -1)
end
redis.call('PEXPIRE', KEYS[6], ARGV[2])
return 1
`

// takeKeptLua defines take_kept(kept): the kept replies, which it
// deletes.
const takeKeptLua = `
local function take_kept(kept)
  local replies = redis.call('LRANGE', kept, 0, -1)
  if #replies > 0 then redis.call('DEL', kept) end
  return replies
end
`

// firstSaveLua is a start's first save that takes the lease and does not
// end the session (firstSave).
//
//	KEYS: saveLua's (head, journal, history, claims, lease), fence, kept[,
//	      wakeups[, audit stream, audit head]]
//	ARGV: saveLua's first 11 (the fence ''), lease token, lease ms, fence
//	      ms, thread, wake-up (unix ms or ''), the audit minimum ID, the
//	      number a of audit arguments, a arguments (audit_append's block;
//	      none on a cluster), then the new journal entries
//
// It returns {-1} if another acquisition holds the lease, {0} if the
// thread exists (or the save's other checks fail), both having written
// nothing; else {1, {the kept replies}, the acquisition's number (on a
// cluster; else nil), audit_append's reply or nil}. The audit entries
// are appended after the save's checks and before its writes, as
// saveAuditLua does. Sent again after its answer was lost, it finds its
// own first attempt — the head is this save's checkpoint ID, the lease
// holds this save's token — and returns {1, {}, the acquisition's number
// or nil, what that attempt appended of the audit entries (audit_had)},
// having written nothing: the replies kept for the thread went with the
// lost answer.
const firstSaveLua = auditAppendLua + acquiredLua + saveCheckpointLua + takeKeptLua + `
local lease = redis.call('GET', KEYS[5])
if lease and lease ~= ARGV[12] then return {-1} end
local saved, left, moved, kept = save_check(KEYS, ARGV)
local a = tonumber(ARGV[18])
if saved ~= 1 or left ~= -2 then
  -- The thread exists. With this save's checkpoint at its head and the
  -- lease this save's token, it is this save's first attempt, whose
  -- answer was lost: answer as it did (its kept replies went with it).
  if lease == ARGV[12] and ` + saveHeadIDLua + ` == ARGV[9] then
    ` + auditHadLua + `
    local audited = false
    if KEYS[9] and a > 0 then audited = {audit_had(KEYS[9], KEYS[10], ARGV, 19)} end
    local seq = false
    if not KEYS[8] then seq = redis.call('GET', KEYS[6]) end
    return {1, {}, seq, audited}
  end
  if saved ~= 1 then return {saved} end
  return {0} -- it only creates a thread
end
local audited = false
if KEYS[9] and a > 0 then audited = {audit_append(KEYS[9], KEYS[10], ARGV[17], ARGV, 19)} end
save_write(KEYS, ARGV, 19 + a, left, moved, kept)
redis.call('SET', KEYS[5], ARGV[12], 'PX', ARGV[13])
local seq = false
if KEYS[8] then
  if ARGV[16] ~= '' then redis.call('ZADD', KEYS[8], 'LT', ARGV[16], ARGV[15]) end
else
  seq = acquired(KEYS[6], ARGV[14])
end
return {1, take_kept(KEYS[7]), seq, audited}
`

// firstSaveCloseLua is a start's first save that takes the lease and
// ends the session (firstSave with a LastSave): saveCloseLua's work
// (save_close), with the lease checked as firstSaveLua does and let go in
// the same step: deleted if it held the start's token (the script sent
// again), else never taken, and nothing to delete.
//
//	KEYS: saveLua's (head, journal, history, claims, lease), then
//	      wakeups, kept, then as saveCloseLua's from its seventh: the
//	      audit stream and head (only with entries to append), the i
//	      keys of updateInboxLua (none without an inbox update)
//	ARGV: saveLua's first 11 (the fence ''), the lease token, then as
//	      saveCloseLua's from its twelfth: the number of claims to read,
//	      closeLua's arguments from the thread on, updateInboxLua's from
//	      its second on (i + 1 of them), then the new journal entries
//
// It returns {-1} or {0} as firstSaveLua does, else saveCloseLua's list
// followed by the number of kept replies and those replies (one flat
// list: a script's reply costs Redis more for each table it holds).
const firstSaveCloseLua = auditAppendLua + saveCheckpointLua + closeThreadLua + updateInboxFnLua + saveCloseFnLua + `
-- A new thread, the common case: none of its lease, claims, head,
-- journal, history or kept replies exist. One command tells, where the
-- lease, the claims' head, the other keys and the kept replies would be
-- four.
if redis.call('EXISTS', KEYS[5], KEYS[4], KEYS[1], KEYS[2], KEYS[3], KEYS[7]) == 0 then
  local reply, n = save_close(KEYS, ARGV, 13, 8, 'free', true)
  if reply[1] == 1 then reply[n + 1] = 0 end
  return reply
end
local lease = redis.call('GET', KEYS[5])
if lease and lease ~= ARGV[12] then return {-1} end
local reply, n = save_close(KEYS, ARGV, 13, 8, lease and true or 'free')
if reply[1] ~= 1 then return reply end
-- The kept replies, which it deletes (take_kept, written out here: the
-- common case above takes none).
local replies = redis.call('LRANGE', KEYS[7], 0, -1)
if #replies > 0 then redis.call('DEL', KEYS[7]) end
reply[n + 1] = #replies
for i = 1, #replies do reply[n + 1 + i] = replies[i] end
return reply
`
