package redisstore

import (
	"context"
	"fmt"
)

// Claim sets the thread's claim key to value unless it is set already, in
// one atomic step: of many concurrent claims of one key (two clicks, two
// replicas), exactly one wins. It returns the value that holds the claim
// (value itself when won is true) and whether this call set it. Claims
// expire with the thread.
func (s *Store) Claim(ctx context.Context, thread, key string, value []byte) (winner []byte, won bool, err error) {
	k, err := s.keys(thread)
	if err == nil {
		err = checkClaimKeys(key)
	}
	if err != nil {
		return nil, false, fmt.Errorf("claim %s: %w", key, err)
	}
	res, err := s.runScript(ctx, s.claimScript, claimLua, []string{k.claims, k.head}, key, value, s.ttl.Milliseconds()).Slice()
	if err != nil {
		return nil, false, fmt.Errorf("claim %s in %s: %w", key, thread, err)
	}
	if len(res) > 0 && res[0] == int64(1) {
		return value, true, nil
	}
	if len(res) == 2 {
		if stored, ok := res[1].(string); ok {
			return []byte(stored), false, nil
		}
	}
	return nil, false, fmt.Errorf("claim %s in %s: unexpected reply %v", key, thread, res)
}

// Claims returns every claim of the thread, keyed by claim key; none is an
// empty map.
func (s *Store) Claims(ctx context.Context, thread string) (map[string][]byte, error) {
	k, err := s.keys(thread)
	if err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	all, err := s.rdb.HGetAll(ctx, k.claims).Result()
	if err != nil {
		return nil, fmt.Errorf("claims of %s: %w", thread, err)
	}
	claims := make(map[string][]byte, len(all))
	for key, v := range all {
		if !isHeadField(key) {
			claims[key] = []byte(v)
		}
	}
	return claims, nil
}
