package cyclebench

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeyKind is the memory of the keys of one kind: keys whose names differ
// only in the thread's name and in IDs.
type KeyKind struct {
	// Kind is the keys' name with the thread as {T} and IDs as *.
	Kind string
	// Keys is how many there are, Bytes their MEMORY USAGE in all.
	Keys, Bytes int64
	// Encoding is the OBJECT ENCODING of the kind's first key seen.
	Encoding string
	// Expiring is how many of the keys have an expiry; Shortest the
	// least time left of those, when they were read.
	Expiring int64
	Shortest time.Duration
}

// threadPart and idPart are what differs between keys of one kind: the
// thread's name between braces, and IDs (hex digits, or a button
// reference's base32, escaped as the store escapes it).
var (
	threadPart = regexp.MustCompile(`\{[^}]*:[^}]*\}`)
	idPart     = regexp.MustCompile(`[0-9A-Z*]{16,}|[0-9a-fA-F.%-]{6,}`)
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
				p.PTTL(ctx, k)
				p.ObjectEncoding(ctx, k)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) { // a key expired meanwhile
			return err
		}
		for i, key := range keys {
			kind := KindOf(key)
			s := sums[kind]
			if s == nil {
				s = &KeyKind{Kind: kind, Encoding: cmds[3*i+2].(*redis.StringCmd).Val()}
				sums[kind] = s
			}
			s.Keys++
			s.Bytes += cmds[3*i].(*redis.IntCmd).Val()
			if ttl := cmds[3*i+1].(*redis.DurationCmd).Val(); ttl > 0 {
				if s.Expiring == 0 || ttl < s.Shortest {
					s.Shortest = ttl
				}
				s.Expiring++
			}
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
	fmt.Fprintf(&b, "%-40s %7s %11s %9s  %-10s %s\n", "key", "keys", "bytes", "B/thread", "encoding", "expiry")
	for _, k := range kinds {
		expiry := "none"
		switch {
		case k.Expiring == k.Keys:
			expiry = "in " + k.Shortest.Round(time.Minute).String() + " or more"
		case k.Expiring > 0:
			expiry = fmt.Sprintf("%d of %d, in %s or more", k.Expiring, k.Keys, k.Shortest.Round(time.Minute))
		}
		fmt.Fprintf(&b, "%-40s %7d %11d %9.0f  %-10s %s\n", k.Kind, k.Keys, k.Bytes, float64(k.Bytes)/float64(threads), k.Encoding, expiry)
	}
	return b.String()
}

// MemoryStats is the numbers of MEMORY STATS that say where memory goes
// besides the keys' own: the server's key tables, clients, scripts.
type MemoryStats map[string]int64

// ReadMemoryStats reads MEMORY STATS.
func ReadMemoryStats(ctx context.Context, rdb *redis.Client) (MemoryStats, error) {
	res, err := rdb.Do(ctx, "MEMORY", "STATS").Result()
	if err != nil {
		return nil, err
	}
	out := MemoryStats{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[any]any:
			for k, x := range v {
				walk(prefix+fmt.Sprint(k)+".", x)
			}
		case []any: // RESP2: name, value, name, value…
			for i := 0; i+1 < len(v); i += 2 {
				walk(prefix+fmt.Sprint(v[i])+".", v[i+1])
			}
		case int64:
			out[strings.TrimSuffix(prefix, ".")] = v
		}
	}
	walk("", res)
	return out, nil
}

// PrintOverhead prints, per thread of threads, how much the memory the
// keys' MEMORY USAGE does not count grew from before to after: the
// server's tables of keys and of expiries, clients, scripts.
func PrintOverhead(before, after MemoryStats, threads int) string {
	var b strings.Builder
	for _, name := range []string{"db.0.overhead.hashtable.main", "db.0.overhead.hashtable.expires",
		"clients.normal", "lua.caches", "keys.count"} {
		fmt.Fprintf(&b, "%-40s %+11d %9.1f\n", name, after[name]-before[name], float64(after[name]-before[name])/float64(threads))
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
