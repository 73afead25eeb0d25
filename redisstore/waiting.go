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
// WaitingTotal counts the inbox's entries, and a close, like SetWaiting,
// forgets the count an earlier version kept for the thread.

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
