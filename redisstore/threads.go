package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/graph"
)

// Threads returns the name of every thread the store holds, for operators
// (it scans the keyspace: on a cluster, every master's).
func (s *Store) Threads(ctx context.Context) ([]string, error) {
	pattern := s.prefix + ":{*}:history" // every saved thread has one
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 500).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			inner := strings.TrimSuffix(strings.TrimPrefix(key, s.prefix+":{"), "}:history")
			out = append(out, unescape(inner))
		}
		return iter.Err()
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.Client:
		err = scan(ctx, c)
	case *redis.ClusterClient:
		var mu = make(chan struct{}, 1)
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu <- struct{}{}
			defer func() { <-mu }()
			return scan(ctx, m)
		})
	default:
		err = errors.New("unsupported Redis client")
	}
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	return out, nil
}

// Head returns the thread's latest checkpoint without its journal, or
// graph.ErrNoCheckpoint.
func (s *Store) Head(ctx context.Context, thread string) (*graph.Checkpoint, error) {
	k, err := s.keys(thread)
	if err != nil {
		return nil, err
	}
	meta, err := s.rdb.LIndex(ctx, k.history, 0).Result()
	if errors.Is(err, redis.Nil) {
		return nil, graph.ErrNoCheckpoint
	}
	if err != nil {
		return nil, fmt.Errorf("head of %s: %w", thread, err)
	}
	return decodeCheckpoint(meta)
}

// unescape undoes escape.
func unescape(name string) string {
	if !strings.Contains(name, "%") {
		return name
	}
	r := strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%")
	return r.Replace(name)
}
