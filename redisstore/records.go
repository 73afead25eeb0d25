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
// its stream entry's "id" (its first part is the time in Unix ms).
func (s *Store) AuditLog(ctx context.Context, n int) ([]map[string]string, error) {
	msgs, err := s.rdb.XRevRangeN(ctx, s.prefix+":audit", "+", "-", int64(n)).Result()
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	out := make([]map[string]string, 0, len(msgs))
	for _, m := range msgs {
		rec := make(map[string]string, len(m.Values)+1)
		for k, v := range m.Values {
			rec[k] = fmt.Sprint(v)
		}
		rec["id"] = m.ID
		out = append(out, rec)
	}
	return out, nil
}

// SetWaiting records how many of thread's calls wait for a person; 0
// forgets the thread.
func (s *Store) SetWaiting(ctx context.Context, thread string, n int) error {
	var err error
	if n <= 0 {
		err = s.rdb.HDel(ctx, s.prefix+":waiting", thread).Err()
	} else {
		err = s.rdb.HSet(ctx, s.prefix+":waiting", thread, n).Err()
	}
	if err != nil {
		return fmt.Errorf("record waiting calls of %s: %w", thread, err)
	}
	return nil
}

// WaitingTotal returns how many calls wait for a person, in all threads.
func (s *Store) WaitingTotal(ctx context.Context) (int, error) {
	counts, err := s.rdb.HVals(ctx, s.prefix+":waiting").Result()
	if err != nil {
		return 0, fmt.Errorf("count waiting calls: %w", err)
	}
	total := 0
	for _, c := range counts {
		n, err := strconv.Atoi(c)
		if err != nil {
			return 0, fmt.Errorf("count waiting calls: %w", err)
		}
		total += n
	}
	return total, nil
}
