package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The records below are not a thread's: each is a key of its own (see
// the package doc for the layout).

// dedupLua remembers a key once.
//
//	KEYS: key
//	ARGV: token, expiry in milliseconds
//
// It returns 1 when the key is new or holds this token — the first
// attempt of the same call stored it and its answer was lost — else 0.
const dedupLua = `
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] then return 1 end
return 0
`

var dedupScript = redis.NewScript(dedupLua)

// Dedup reports whether key is seen for the first time, and remembers it
// for ttl. The key holds a token of this call, so that when go-redis
// sends the command again after a cut or a timed-out answer, the retry
// that finds the first attempt's write still reports the first sighting
// instead of taking it for a repeated delivery. One round trip.
func (s *Store) Dedup(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	n, err := dedupScript.Run(ctx, s.rdb, []string{s.prefix + ":dedup:" + escape(key)}, newToken(), ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("dedup %s: %w", key, err)
	}
	return n == 1, nil
}

// newToken returns a random token that tells one call's write from
// another's.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// PutRef stores value under ref for ttl, compressed (refs.go).
func (s *Store) PutRef(ctx context.Context, ref string, value []byte, ttl time.Duration) error {
	if err := s.rdb.Set(ctx, s.prefix+":ref:"+escape(ref), compressRef(value), ttl).Err(); err != nil {
		return fmt.Errorf("store reference: %w", err)
	}
	return nil
}

// SwapRef stores value under ref for ttl and returns what ref held
// before, and whether it held anything: one command (SET … GET).
func (s *Store) SwapRef(ctx context.Context, ref string, value []byte, ttl time.Duration) ([]byte, bool, error) {
	old, err := s.rdb.SetArgs(ctx, s.prefix+":ref:"+escape(ref), compressRef(value), redis.SetArgs{TTL: ttl, Get: true}).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err == nil:
		old, err = expandRef(old)
	}
	if err != nil {
		return nil, false, fmt.Errorf("store reference: %w", err)
	}
	return old, true, nil
}

// Ref returns the value stored under ref, and whether there is one.
func (s *Store) Ref(ctx context.Context, ref string) ([]byte, bool, error) {
	v, err := s.rdb.Get(ctx, s.prefix+":ref:"+escape(ref)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err == nil {
		v, err = expandRef(v)
	}
	if err != nil {
		return nil, false, fmt.Errorf("load reference: %w", err)
	}
	return v, true, nil
}

// Wake sets when thread is to be looked at again.
func (s *Store) Wake(ctx context.Context, thread string, at time.Time) error {
	if err := s.rdb.ZAdd(ctx, s.prefix+":wakeups", redis.Z{Score: float64(at.UnixMilli()), Member: thread}).Err(); err != nil {
		return fmt.Errorf("schedule %s: %w", thread, err)
	}
	return nil
}

// WakeBy makes sure thread is looked at no later than at: it adds the
// wake-up, or moves an existing one earlier (ZADD LT), never later.
func (s *Store) WakeBy(ctx context.Context, thread string, at time.Time) error {
	if err := s.rdb.ZAddLT(ctx, s.prefix+":wakeups", redis.Z{Score: float64(at.UnixMilli()), Member: thread}).Err(); err != nil {
		return fmt.Errorf("schedule %s: %w", thread, err)
	}
	return nil
}

// scheduledByKey is the key that says which acquisition of thread's
// lease last set its wake-up. Its hash tag is the schedule's own name
// (the prefix holds no braces), so on a cluster both are in one slot and
// one script reads the one and writes the other.
func (s *Store) scheduledByKey(thread string) string {
	return "{" + s.prefix + ":wakeups}:by:" + escape(thread)
}

// setWakeup writes thread's wake-up on behalf of the lease acquisition
// numbered seq (acquiredLua): at, or none when at is zero, unless a later
// acquisition has set it since (then it writes nothing and reports
// false); or, with earlier, at only if that is earlier than the wake-up
// there (ZADD LT), whoever set it. It is how a cluster, where the
// schedule is in another slot than the thread and is written after the
// lease is released, keeps a close that arrives late — its process
// stalled, or the schedule's master failing over — from moving the
// recovery wake-up of the acquisition after it later, or removing it.
func (s *Store) setWakeup(ctx context.Context, thread, seq string, at time.Time, earlier bool) (bool, error) {
	mode, when := "set", "0"
	if earlier {
		mode = "earlier"
	}
	if !at.IsZero() {
		when = strconv.FormatInt(at.UnixMilli(), 10)
	}
	n, err := s.scheduleScript.Run(ctx, s.rdb, []string{s.prefix + ":wakeups", s.scheduledByKey(thread)},
		thread, seq, when, mode, s.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("schedule %s: %w", thread, err)
	}
	return n == 1, nil
}

// scheduleLua sets a thread's wake-up for an acquisition of its lease.
//
//	KEYS: wakeups, the thread's scheduled-by key
//	ARGV: thread, the acquisition's number, wake-up (unix ms, '0' for
//	      none), 'set' or 'earlier', scheduled-by expiry ms
//
// "set" writes (or removes) the wake-up unless the scheduled-by key names
// a later acquisition; "earlier" only moves it earlier (ZADD LT), which
// is safe whoever set it. Either records the acquisition in the
// scheduled-by key if it is the latest to write. The numbers are compared
// as numbers of equal length (microseconds), a missing key as 0. It
// returns 1 if it wrote the wake-up, else 0.
const scheduleLua = `
local by = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local seq = tonumber(ARGV[2]) or 0
if ARGV[4] == 'earlier' then
  if ARGV[3] ~= '0' then redis.call('ZADD', KEYS[1], 'LT', ARGV[3], ARGV[1]) end
elseif seq < by then
  return 0
elseif ARGV[3] == '0' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
if seq >= by then redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[5]) end
return 1
`

// Due returns up to n threads whose wake-up time is at or before now,
// earliest first.
func (s *Store) Due(ctx context.Context, now time.Time, n int) ([]string, error) {
	threads, err := s.rdb.ZRangeByScore(ctx, s.prefix+":wakeups", &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: int64(n),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("due threads: %w", err)
	}
	return threads, nil
}

// Forget removes thread from the wake-ups.
func (s *Store) Forget(ctx context.Context, thread string) error {
	if err := s.rdb.ZRem(ctx, s.prefix+":wakeups", thread).Err(); err != nil {
		return fmt.Errorf("unschedule %s: %w", thread, err)
	}
	return nil
}

// AuditLog returns the newest n audit records, newest first, each with
// its stream entry's "id" (its first part is the time in Unix ms); a
// packed entry's fields are unpacked (auditFields).
func (s *Store) AuditLog(ctx context.Context, n int) ([]map[string]string, error) {
	msgs, err := s.rdb.XRevRangeN(ctx, s.prefix+":audit", "+", "-", int64(n)).Result()
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	out := make([]map[string]string, 0, len(msgs))
	for _, m := range msgs {
		rec := auditFields(m.Values)
		rec["id"] = m.ID
		out = append(out, rec)
	}
	return out, nil
}

// SetWaiting implements runner.Schedule. The store keeps no count of
// its own (waiting.go): whatever n, it forgets the count an earlier
// version kept for thread.
func (s *Store) SetWaiting(ctx context.Context, thread string, _ int) error {
	return s.forgetWaiting(ctx, thread)
}

// WaitingTotal returns how many calls wait for a decision, in all
// threads: the calls of the inbox's entries (the /metrics gauge of
// pending approvals, at most once per 5 s of scrapes). One HVALS of the inbox, about 90
// bytes a waiting thread, whose entries are counted, not decoded
// (countWaiting).
func (s *Store) WaitingTotal(ctx context.Context) (int, error) {
	vals, err := s.rdb.HVals(ctx, s.inboxKey("calls")).Result()
	if err != nil {
		return 0, fmt.Errorf("count waiting calls: %w", err)
	}
	total := 0
	for _, v := range vals {
		n, err := countWaiting([]byte(v))
		if err != nil {
			return 0, fmt.Errorf("count waiting calls: %w", err)
		}
		total += n
	}
	return total, nil
}

// The records of a card's buttons and of where the card went, each
// written in the step that needs it: the card's and its copies' records
// together (ClaimAll), and a click's dedup with the lookup of what its
// button names: a claim of the thread's (DedupClaim), or a reference
// (DedupRef). On a single server each is one script; on a Redis Cluster,
// where a dedup key is in a slot of its own, the claim or the reference
// is read in a step of its own.

// claimAllLua sets claims once each.
//
//	KEYS: claims, head
//	ARGV: expiry in milliseconds, then a claim key and its value per claim
//
// It returns each claim's stored value, in order: this call's, or the
// one set before it. A new claim gives the hash an expiry as claimLua
// does.
const claimAllLua = `
local out, new = {}, false
for i = 2, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    new = true
    out[#out + 1] = ARGV[i + 1]
  else
    out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i])
  end
end
if new and redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[1]), redis.call('PTTL', KEYS[2])))
end
return out
`

var claimAllScript = redis.NewScript(claimAllLua)

// ClaimAll sets each claim of values in thread once, in one step, and
// returns the stored values: this call's, or those set before it.
func (s *Store) ClaimAll(ctx context.Context, thread string, values map[string][]byte) (map[string][]byte, error) {
	k, err := s.keys(thread)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	names := make([]string, 0, len(values))
	args := []any{s.ttl.Milliseconds()}
	for name, v := range values {
		names = append(names, name)
		args = append(args, name, v)
	}
	res, err := s.runScript(ctx, claimAllScript, claimAllLua, []string{k.claims, k.head}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("claim in %s: %w", thread, err)
	}
	if len(res) != len(names) {
		return nil, fmt.Errorf("claim in %s: unexpected reply %v", thread, res)
	}
	out := make(map[string][]byte, len(names))
	for i, name := range names {
		v, _ := res[i].(string)
		out[name] = []byte(v)
	}
	return out, nil
}

// dedupRefLua is dedupLua (in one command: SET … NX GET), then, for a
// key seen for the first time, the value of a reference.
//
//	KEYS: key, the reference's key
//	ARGV: token, expiry in milliseconds
//
// It returns {0} for a key seen before, else {1, the reference's value
// or nil}.
const dedupRefLua = `
local v = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if v ~= false and v ~= ARGV[1] then return {0} end
return {1, redis.call('GET', KEYS[2])}
`

var dedupRefScript = redis.NewScript(dedupRefLua)

// DedupRef is Dedup of key, then, if key is seen for the first time, Ref
// of ref (none if ref is ""): one step on a single server, two on a
// Redis Cluster.
func (s *Store) DedupRef(ctx context.Context, key string, ttl time.Duration, ref string) (first bool, value []byte, found bool, err error) {
	if ref == "" || s.isCluster() {
		if first, err = s.Dedup(ctx, key, ttl); err != nil || !first || ref == "" {
			return first, nil, false, err
		}
		value, found, err = s.Ref(ctx, ref)
		return true, value, found, err
	}
	first, value, found, err = s.dedupThen(ctx, dedupRefScript, key, s.prefix+":ref:"+escape(ref), newToken(), ttl.Milliseconds())
	if err != nil || !found {
		return first, nil, false, err
	}
	if value, err = expandRef(value); err != nil {
		return false, nil, false, fmt.Errorf("dedup %s: %w", key, err)
	}
	return true, value, true, nil
}

// dedupThen runs script, dedupRefLua or dedupClaimLua, on key's dedup
// key and lookup with args, and reads its reply: whether key was seen
// for the first time, and then what the lookup found.
func (s *Store) dedupThen(ctx context.Context, script *redis.Script, key, lookup string, args ...any) (first bool, value []byte, found bool, err error) {
	res, err := script.Run(ctx, s.rdb, []string{s.prefix + ":dedup:" + escape(key), lookup}, args...).Slice()
	if err != nil {
		return false, nil, false, fmt.Errorf("dedup %s: %w", key, err)
	}
	if len(res) == 0 || res[0] != int64(1) {
		return false, nil, false, nil
	}
	if len(res) > 1 {
		if v, ok := res[1].(string); ok {
			return true, []byte(v), true, nil
		}
	}
	return true, nil, false, nil
}

// dedupClaimLua is dedupLua (in one command: SET … NX GET), then, for a
// key seen for the first time, a claim of a thread's.
//
//	KEYS: key, the thread's claims
//	ARGV: token, expiry in milliseconds, claim key
//
// It returns {0} for a key seen before, else {1, the claim's value or
// nil}.
const dedupClaimLua = `
local v = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if v ~= false and v ~= ARGV[1] then return {0} end
return {1, redis.call('HGET', KEYS[2], ARGV[3])}
`

var dedupClaimScript = redis.NewScript(dedupClaimLua)

// DedupClaim is Dedup of key, then, if key is seen for the first time,
// the value of thread's claim (ClaimValues): one step on a single server,
// two on a Redis Cluster.
func (s *Store) DedupClaim(ctx context.Context, key string, ttl time.Duration, thread, claim string) (first bool, value []byte, found bool, err error) {
	k, err := s.keys(thread)
	if err == nil {
		err = checkClaimKeys(claim)
	}
	if err != nil {
		return false, nil, false, fmt.Errorf("dedup %s: %w", key, err)
	}
	if s.isCluster() {
		if first, err = s.Dedup(ctx, key, ttl); err != nil || !first {
			return first, nil, false, err
		}
		vals, err := s.ClaimValues(ctx, thread, []string{claim})
		if err != nil {
			return true, nil, false, err
		}
		value, found = vals[claim]
		return true, value, found, nil
	}
	return s.dedupThen(ctx, dedupClaimScript, key, k.claims, newToken(), ttl.Milliseconds(), claim)
}
