package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A mailbox carries one answer from the replica that received it (a
// person's answer through Slack) to the one waiting for it (a tool call
// that asked): a list at <prefix>:mailbox:<box>, pushed once and popped
// by the waiter.

// Deliver puts value into box, where it waits at most ttl for Receive.
// Several processes may deliver and receive; each value is received once.
func (s *Store) Deliver(ctx context.Context, box string, value []byte, ttl time.Duration) error {
	key := s.prefix + ":mailbox:" + escape(box)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, key, value)
		p.Expire(ctx, key, ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("deliver to %s: %w", box, err)
	}
	return nil
}

// receiveSlice bounds one blocking pop, so that a cancelled ctx is seen
// soon even on a connection that does not watch it.
const receiveSlice = 5 * time.Second

// Receive waits for a value in box until ctx ends, and takes it.
func (s *Store) Receive(ctx context.Context, box string) ([]byte, error) {
	key := s.prefix + ":mailbox:" + escape(box)
	for {
		wait := receiveSlice
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d))
		}
		if wait <= 0 {
			return nil, ctx.Err()
		}
		// BLPOP's timeout has a resolution of milliseconds; below that it
		// would block for ever.
		wait = max(wait, time.Millisecond)
		res, err := s.rdb.BLPop(ctx, wait, key).Result()
		switch {
		case err == nil:
			return []byte(res[1]), nil
		case errors.Is(err, redis.Nil):
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		case ctx.Err() != nil:
			return nil, ctx.Err()
		default:
			return nil, fmt.Errorf("receive from %s: %w", box, err)
		}
	}
}
