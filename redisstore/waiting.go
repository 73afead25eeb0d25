package redisstore

import (
	"context"
	"fmt"
)

// The waiting count. The calls that wait for a decision are in the inbox
// (inbox.go), an entry per thread that the runner writes with each
// session's close; a count of them per thread beside it, in a hash of
// its own (cs:waiting, and on a cluster a key per thread saying which
// lease acquisition wrote it), cost a paused thread about 100 bytes and
// was read by nothing but WaitingTotal. The store keeps no count now:
// WaitingTotal counts the inbox's entries. A close writes nothing there
// (it would cost a turn a command); SetWaiting forgets the count an
// earlier version kept for a thread, and RetireWaitingCounts gives the
// earlier version's hash an expiry, so that what it holds goes with the
// threads it counted.

// waitingKey is the hash of counts an earlier version kept.
func (s *Store) waitingKey() string { return s.prefix + ":waiting" }

// forgetWaiting removes the count an earlier version kept for thread, if
// any. Nothing writes counts any more, so the order of two removals
// does not matter: unlike the wake-up, it needs no guard.
func (s *Store) forgetWaiting(ctx context.Context, thread string) error {
	if err := s.rdb.HDel(ctx, s.waitingKey(), thread).Err(); err != nil {
		return fmt.Errorf("forget the waiting count of %s: %w", thread, err)
	}
	return nil
}

// RetireWaitingCounts makes the hash of counts an earlier version kept
// expire when a thread touched now would: its counts are of threads
// that expire by then, or are settled and counted in the inbox. An
// earlier version
// still running during a rolling deploy keeps the expiry when it writes
// (HSET keeps it).
func (s *Store) RetireWaitingCounts(ctx context.Context) error {
	if err := s.rdb.PExpire(ctx, s.waitingKey(), s.ttl).Err(); err != nil {
		return fmt.Errorf("retire the waiting counts: %w", err)
	}
	return nil
}
