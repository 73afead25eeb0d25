package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A lease says which process runs a thread right now. It is a plain Redis
// key holding the owner's name with its own expiry; only the owner can
// renew or release it.

// AcquireLease makes owner the holder of the thread's lease for ttl if
// nobody holds it, and reports whether it did. A lease that is held, even
// by owner itself, is not acquired again: extend it with RenewLease.
func (s *Store) AcquireLease(ctx context.Context, thread, owner string, ttl time.Duration) (bool, error) {
	k, err := s.leaseKey(thread, owner, ttl)
	if err != nil {
		return false, fmt.Errorf("acquire lease: %w", err)
	}
	ok, err := s.rdb.SetNX(ctx, k, owner, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("acquire lease on %s: %w", thread, err)
	}
	return ok, nil
}

// RenewLease extends owner's lease on the thread to ttl from now, and
// reports false if owner no longer holds it (it expired, and perhaps
// someone else took it).
func (s *Store) RenewLease(ctx context.Context, thread, owner string, ttl time.Duration) (bool, error) {
	k, err := s.leaseKey(thread, owner, ttl)
	if err != nil {
		return false, fmt.Errorf("renew lease: %w", err)
	}
	renewed, err := s.renewScript.Run(ctx, s.rdb, []string{k}, owner, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("renew lease on %s: %w", thread, err)
	}
	return renewed == 1, nil
}

// ReleaseLease gives up owner's lease on the thread. It leaves a lease that
// someone else holds alone, and is not an error when owner holds none.
func (s *Store) ReleaseLease(ctx context.Context, thread, owner string) error {
	k, err := s.leaseKey(thread, owner, time.Millisecond)
	if err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	if err := s.releaseScript.Run(ctx, s.rdb, []string{k}, owner).Err(); err != nil {
		return fmt.Errorf("release lease on %s: %w", thread, err)
	}
	return nil
}

// leaseKey checks a lease call's arguments and returns the lease's key.
func (s *Store) leaseKey(thread, owner string, ttl time.Duration) (string, error) {
	k, err := s.keys(thread)
	switch {
	case err != nil:
		return "", err
	case owner == "":
		return "", errors.New("empty lease owner")
	case ttl < time.Millisecond:
		return "", fmt.Errorf("lease duration %v is under a millisecond", ttl)
	}
	return k.lease, nil
}
