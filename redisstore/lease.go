package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/runner"
)

// A lease says which process runs a thread right now, and which of its
// acquisitions: it is a plain Redis key holding the acquisition's token
// (runner.NewLeaseToken: the owner's name and 128 random bits) with its
// own expiry. Only that token renews or releases it, or fences a save,
// so a run that stalled past its lease is fenced even from a later run of
// its own process. The token is made here rather than by a Redis counter:
// acquiring stays one command on the thread's own key, on a single server
// and on a cluster alike.

// AcquireLease makes owner the holder of the thread's lease for ttl if
// nobody holds it, and returns the acquisition's token; "" if the lease
// is held, even by owner itself (extend it with RenewLease).
func (s *Store) AcquireLease(ctx context.Context, thread, owner string, ttl time.Duration) (string, error) {
	k, err := s.leaseKey(thread, owner, ttl)
	if err != nil {
		return "", fmt.Errorf("acquire lease: %w", err)
	}
	token := runner.NewLeaseToken(owner)
	ok, err := s.rdb.SetNX(ctx, k, token, ttl).Result()
	if err != nil {
		return "", fmt.Errorf("acquire lease on %s: %w", thread, err)
	}
	if !ok {
		return "", nil
	}
	return token, nil
}

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
