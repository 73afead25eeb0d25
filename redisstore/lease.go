package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/runner"
)

// A lease says which process runs a thread right now, and which of its
// acquisitions: it is a plain Redis key holding the acquisition's token
// (runner.NewLeaseToken: the owner's name and 128 random bits) with its
// own expiry. Only that token renews or releases it, or fences a save,
// so a run that stalled past its lease is fenced even from a later run of
// its own process. The token is made here rather than by a Redis counter:
// acquiring stays one script on the thread's own slot, on a single server
// and on a cluster alike.
//
// A random token says which acquisition holds the lease, not which came
// first. Writes outside the thread's slot — its wake-up, on a cluster —
// need that order, so every acquisition also takes a number from the
// thread's fence key (acquiredLua): greater than the one before it, and
// kept in the fence key for as long as the acquisition holds the lease.

// AcquireLease makes owner the holder of the thread's lease for ttl if
// nobody holds it, and returns the acquisition's token; "" if the lease
// is held, even by owner itself (extend it with RenewLease).
func (s *Store) AcquireLease(ctx context.Context, thread, owner string, ttl time.Duration) (string, error) {
	k, err := s.leaseKey(thread, owner, ttl)
	if err != nil {
		return "", fmt.Errorf("acquire lease: %w", err)
	}
	tk, _ := s.keys(thread)
	token := runner.NewLeaseToken(owner)
	err = s.acquireScript.Run(ctx, s.rdb, []string{k, tk.fence}, token, ttl.Milliseconds(), s.fenceTTL(ttl)).Err()
	if errors.Is(err, redis.Nil) {
		return "", nil // held
	}
	if err != nil {
		return "", fmt.Errorf("acquire lease on %s: %w", thread, err)
	}
	return token, nil
}

// fenceTTL is how long a thread's fence key is kept: as long as its
// other keys, and never less than a lease.
func (s *Store) fenceTTL(lease time.Duration) int64 {
	return max(s.ttl, lease).Milliseconds()
}

// acquiredLua defines acquired(fence, ttl), which a script that has
// just taken a thread's lease calls: it gives the acquisition its
// number, stores it in the thread's fence key for ttl milliseconds and
// returns it (a decimal string). The number is the server's clock in
// microseconds, or one more than the last acquisition's if that is not
// less: so it still grows when the fence key expired, or was not yet
// replicated when a failover made a replica the thread's master — as
// long as the new master's clock is not behind the old one's by more
// than the time between the two acquisitions.
const acquiredLua = `
local function acquired(fence, ttl)
  local t = redis.call('TIME')
  local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
  n = math.max(n, (tonumber(redis.call('GET', fence)) or 0) + 1)
  local seq = string.format('%.0f', n)
  redis.call('SET', fence, seq, 'PX', ttl)
  return seq
end
`

// acquireLua takes a lease if it is free.
//
//	KEYS: lease, fence
//	ARGV: lease token, lease ms, fence ms
//
// It returns the acquisition's number, or false if the lease is held.
const acquireLua = acquiredLua + `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
return acquired(KEYS[2], ARGV[3])
`

// RenewLease extends the lease of the acquisition that token names to
// ttl from now, and reports false if it no longer holds (it expired, and
// perhaps someone else took it, the same owner included).
func (s *Store) RenewLease(ctx context.Context, thread, token string, ttl time.Duration) (bool, error) {
	k, err := s.leaseKey(thread, token, ttl)
	if err != nil {
		return false, fmt.Errorf("renew lease: %w", err)
	}
	renewed, err := s.renewScript.Run(ctx, s.rdb, []string{k}, token, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("renew lease on %s: %w", thread, err)
	}
	return renewed == 1, nil
}

// ReleaseLease gives up the lease of the acquisition that token names.
// It leaves a lease that another acquisition holds alone, and is not an
// error when the lease is free.
func (s *Store) ReleaseLease(ctx context.Context, thread, token string) error {
	k, err := s.leaseKey(thread, token, time.Millisecond)
	if err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	if err := s.releaseScript.Run(ctx, s.rdb, []string{k}, token).Err(); err != nil {
		return fmt.Errorf("release lease on %s: %w", thread, err)
	}
	return nil
}

// leaseKey checks a lease call's arguments (who: the owner or the
// token) and returns the lease's key.
func (s *Store) leaseKey(thread, who string, ttl time.Duration) (string, error) {
	k, err := s.keys(thread)
	switch {
	case err != nil:
		return "", err
	case who == "":
		return "", errors.New("empty lease owner or token")
	case ttl < time.Millisecond:
		return "", fmt.Errorf("lease duration %v is under a millisecond", ttl)
	}
	return k.lease, nil
}
