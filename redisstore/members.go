package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Membership changes: Slack tells the bot (by an event, to one replica)
// that a user group's or a channel's members changed; every replica must
// then ask Slack again before it lets that membership decide a call. The
// mark is kept here, where all replicas see it. Both keys share the hash
// tag {members}, so one script writes them:
//
//	cs:{members}:changed        hash    "group:<S…>" or "channel:<C…>" → the mark of its
//	                                    latest change: unix ms and a random token, unique
//	                                    to each write; the whole hash expires a while
//	                                    (the caller's ttl) after its latest write
//	cs:{members}:seen:<event>   string  a change event seen, so that a repeated
//	                                    delivery marks nothing again; expires
//
// A mark grants nothing: it only tells a replica that what it remembers
// of those members may be out of date.

// markMembersLua records a membership change event once.
//
//	KEYS: the changed hash, the event's seen key
//	ARGV: the mark, the hash's expiry (ms), the seen key's expiry (ms),
//	      then the fields to mark
//
// It returns 1 when the event was new (and marked its fields), else 0.
const markMembersLua = `
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) == false then return 0 end
for i = 4, #ARGV do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`

var markMembersScript = redis.NewScript(markMembersLua)

// MarkMembersChanged marks fields ("group:<S…>", "channel:<C…>") as changed, with
// a new mark each, and keeps the marks for ttl after this write; event
// names the change (the event's ID), remembered for seenTTL so that a
// repeated delivery marks nothing. It reports whether event was new. One
// round trip. A resent command whose first attempt wrote the marks finds
// the event seen: the marks are there all the same. With
// Options.Replicas the marks are written as the intake's steps are
// (runScript): a WAIT in the same round trip, and ErrNotReplicated
// unless enough replicas acknowledged them, so that the event is not
// acknowledged to Slack (which sends it again) while only a master that
// a failover may lose has its mark.
func (s *Store) MarkMembersChanged(ctx context.Context, event string, fields []string, ttl, seenTTL time.Duration) (bool, error) {
	if len(fields) == 0 {
		return false, nil
	}
	mark := strconv.FormatInt(time.Now().UnixMilli(), 10) + "-" + newToken()
	args := make([]any, 0, 3+len(fields))
	args = append(args, mark, ttl.Milliseconds(), seenTTL.Milliseconds())
	for _, f := range fields {
		args = append(args, f)
	}
	keys := []string{s.membersKey("changed"), s.membersKey("seen:" + escape(event))}
	n, err := s.runScript(ctx, markMembersScript, markMembersLua, keys, args...).Int()
	if err != nil {
		return false, fmt.Errorf("mark members changed: %w", err)
	}
	return n == 1, nil
}

// MembersChangedMark returns the mark of field's latest change ("" if it
// has none). A different mark means a change since; a mark begins with
// the change's Unix time in milliseconds, then "-". One round trip (HGET).
func (s *Store) MembersChangedMark(ctx context.Context, field string) (string, error) {
	mark, err := s.rdb.HGet(ctx, s.membersKey("changed"), field).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read members changed mark: %w", err)
	}
	return mark, nil
}

func (s *Store) membersKey(name string) string { return s.prefix + ":{members}:" + name }
