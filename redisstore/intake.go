package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The intake keeps a request from before it is acknowledged until its
// conversation is under way: a record per request, and an index of when
// each must be looked at again if nobody has said it started. Both keys
// share the hash tag {intake}, so one script writes them together on a
// cluster too.

// acceptLua records a request once and schedules its re-drive.
//
//	KEYS: record, due index, the record's token
//	ARGV: id, record, expiry in ms, due in unix ms, token
//
// It returns 1 if this call recorded it — or an earlier attempt of this
// same call, with the same token, whose answer was lost — and 0 if
// another call recorded it already.
const acceptLua = `
if redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) == false then
  if redis.call('GET', KEYS[3]) == ARGV[5] then return 1 end
  return 0
end
redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
return 1
`

// dueIntakeLua takes up to n requests whose time has come, and moves each
// one's time to "until", so that one process re-drives it at a time.
//
//	KEYS: due index
//	ARGV: now in unix ms, until in unix ms, n
const dueIntakeLua = `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], ARGV[2], id)
end
return ids
`

func (s *Store) intakeKeys(id string) (record, due string) {
	base := s.prefix + ":{intake}:"
	return base + "req:" + escape(id), base + "due"
}

// intakeToken is the key of the token of the call that recorded id.
func (s *Store) intakeToken(id string) string {
	return s.prefix + ":{intake}:tok:" + escape(id)
}

// Accept records a request under id before it is acknowledged, and
// schedules it to be driven again at due unless Started says it began. It
// reports false, writing nothing, if id was recorded already: a repeated
// delivery. The record is kept for ttl. A retry of this call by the
// client, after a cut answer, still reports true. One round trip.
func (s *Store) Accept(ctx context.Context, id string, record []byte, due time.Time, ttl time.Duration) (bool, error) {
	rec, idx := s.intakeKeys(id)
	n, err := s.acceptScript.Run(ctx, s.rdb, []string{rec, idx, s.intakeToken(id)}, id, record, ttl.Milliseconds(), due.UnixMilli(), newToken()).Int()
	if err != nil {
		return false, fmt.Errorf("accept %s: %w", id, err)
	}
	return n == 1, nil
}

// UpdateIntake replaces the record of an accepted request (keeping its
// expiry), e.g. once its root message is posted.
func (s *Store) UpdateIntake(ctx context.Context, id string, record []byte) error {
	rec, _ := s.intakeKeys(id)
	if err := s.rdb.SetArgs(ctx, rec, record, redis.SetArgs{Mode: "XX", KeepTTL: true}).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("update intake %s: %w", id, err)
	}
	return nil
}

// Started says the request's conversation is under way: it is no longer
// driven again. Its record stays until it expires, so repeats of it are
// still recognised.
func (s *Store) Started(ctx context.Context, id string) error {
	_, idx := s.intakeKeys(id)
	if err := s.rdb.ZRem(ctx, idx, id).Err(); err != nil {
		return fmt.Errorf("intake %s started: %w", id, err)
	}
	return nil
}

// DueIntake takes up to n accepted requests whose time has come and
// returns their records by id; each is put off until "until", so that
// several processes do not drive one request at once. A request whose
// record has expired is dropped.
func (s *Store) DueIntake(ctx context.Context, now, until time.Time, n int) (map[string][]byte, error) {
	_, idx := s.intakeKeys("")
	ids, err := s.dueIntakeScript.Run(ctx, s.rdb, []string{idx}, now.UnixMilli(), until.UnixMilli(), n).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("due intake: %w", err)
	}
	out := make(map[string][]byte, len(ids))
	for _, id := range ids {
		rec, _ := s.intakeKeys(id)
		raw, err := s.rdb.Get(ctx, rec).Bytes()
		if errors.Is(err, redis.Nil) {
			_ = s.rdb.ZRem(ctx, idx, id).Err()
			continue
		}
		if err != nil {
			return out, fmt.Errorf("intake %s: %w", id, err)
		}
		out[id] = raw
	}
	return out, nil
}

// PendingIntake counts accepted requests not yet started.
func (s *Store) PendingIntake(ctx context.Context) (int, error) {
	_, idx := s.intakeKeys("")
	n, err := s.rdb.ZCard(ctx, idx).Result()
	if err != nil {
		return 0, fmt.Errorf("count intake: %w", err)
	}
	return int(n), nil
}
