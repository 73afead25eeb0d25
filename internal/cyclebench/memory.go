package cyclebench

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// KeyKind is the memory of the keys of one kind: keys whose names differ
// only in the thread's name and in IDs.
type KeyKind struct {
	// Kind is the keys' name with the thread as {T} and IDs as *.
	Kind string
	// Keys is how many there are, Bytes their MEMORY USAGE in all.
	Keys, Bytes int64
}

// threadPart and idPart are what differs between keys of one kind: the
// thread's name between braces, and IDs.
var (
	threadPart = regexp.MustCompile(`\{[^}]*:[^}]*\}`)
	idPart     = regexp.MustCompile(`[0-9a-fA-F.%-]{6,}`)
)

// KindOf is the kind of a key.
func KindOf(key string) string {
	kind := threadPart.ReplaceAllString(key, "{T}")
	if j := strings.LastIndexByte(kind, ':'); j >= 0 {
		kind = kind[:j+1] + idPart.ReplaceAllString(kind[j+1:], "*")
	}
	return kind
}

// MemoryByKind sums MEMORY USAGE (every element counted) over every key
// of the server, by kind, largest first.
func MemoryByKind(ctx context.Context, rdb *redis.Client) ([]KeyKind, error) {
	sums := map[string]*KeyKind{}
	var keys []string
	flush := func() error {
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.MemoryUsage(ctx, k, 0)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) { // a key expired meanwhile
			return err
		}
		for i, c := range cmds {
			kind := KindOf(keys[i])
			s := sums[kind]
			if s == nil {
				s = &KeyKind{Kind: kind}
				sums[kind] = s
			}
			s.Keys++
			s.Bytes += c.(*redis.IntCmd).Val()
		}
		keys = keys[:0]
		return nil
	}
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) == 1000 {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	out := make([]KeyKind, 0, len(sums))
	for _, s := range sums {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b KeyKind) int { return int(b.Bytes - a.Bytes) })
	return out, nil
}

// PrintMemory prints kinds as a table, with bytes per thread of threads.
func PrintMemory(kinds []KeyKind, threads int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-40s %7s %11s %9s\n", "key", "keys", "bytes", "B/thread")
	for _, k := range kinds {
		fmt.Fprintf(&b, "%-40s %7d %11d %9.0f\n", k.Kind, k.Keys, k.Bytes, float64(k.Bytes)/float64(threads))
	}
	return b.String()
}

// UsedMemory is the Redis server's used_memory.
func UsedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("no used_memory in INFO memory")
}
