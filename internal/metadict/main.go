// Command metadict is how the dictionaries that redisstore compresses
// checkpoints with (markers metaS2V3 and metaZstdV3,
// redisstore/compress_v3.dict and compress_v3.zstd) were made, and the
// checkpoints its tests and benchmarks read
// (redisstore/testdata/checkpoints.json):
//
//	bash .ci/with-redis bash -c 'go run ./internal/metadict -redis "$REDIS_URL" -out redisstore'
//
// It runs threads through the bot's own wiring (bot.New, with
// cyclebench's scripted model and tool) on the Redis given, and takes the
// checkpoints they saved from their history, in two sets run one after
// the other, each with IDs and times of its own:
//
//   - from the first it makes the dictionaries: their content is a
//     turn-100 answer, a turn-1 claim, a turn-100 pause and a new
//     thread's pause, the nearest last, their times replaced by one of no
//     day (the times of the day it was made would match only checkpoints
//     of that day); S2's (s2.MakeDict) is that content, Zstandard's
//     (zstd.BuildDict) has entropy tables fitted to the whole set too;
//   - the second is the checkpoints for the tests, which the dictionary
//     has not seen.
//
// Each set: three new threads left paused on an approval, a thread's
// first cycle (pause, claim, outcome, answer), and the last three cycles
// of a thread of 100. A dictionary must never change once checkpoints
// are stored with it: running this again makes other ones (other IDs),
// which need new markers. Its keys live under a prefix of their own and
// are deleted afterwards.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/internal/cyclebench"
	"github.com/countersign/countersign/redisstore"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "metadict:", err)
		os.Exit(1)
	}
}

// sample is a checkpoint's JSON as a save compresses it, and what kind
// of checkpoint it is: "paused" (a new thread paused on an approval), or
// "turn N, " and the step of turn N that saved it (see turn).
type sample struct {
	Kind string `json:"kind"`
	Meta string `json:"meta"`
}

// turn is what a turn saves, in order.
var turn = []struct {
	kind   string
	status graph.Status
}{{"paused", graph.Paused}, {"claim", graph.Running}, {"outcome", graph.Running}, {"answer", graph.Done}}

// timestamp matches a time as a checkpoint's JSON holds it.
var timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

const noDay = "2000-01-01T00:00:00.000000000Z"

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("metadict", flag.ContinueOnError)
	redisURL := fs.String("redis", "redis://127.0.0.1:6379/0", "Redis URL")
	out := fs.String("out", "redisstore", "directory of compress_v3.dict and testdata/checkpoints.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts, err := redis.ParseURL(*redisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()

	dictSet, err := runThreads(ctx, rdb, 1700000000)
	if err != nil {
		return err
	}
	testSet, err := runThreads(ctx, rdb, 1764150000)
	if err != nil {
		return err
	}
	var content []byte
	for _, kind := range []string{"turn 100, answer", "turn 1, claim", "turn 100, paused", "paused"} {
		meta, err := firstOf(dictSet, kind)
		if err != nil {
			return err
		}
		content = append(content, meta...)
	}
	content = timestamp.ReplaceAll(content, []byte(noDay))
	// A block's first match is most likely the start of a checkpoint:
	// the repeat offset points there.
	dict := s2.MakeDict(content, []byte(`{"v":2,"thread":"`))
	if dict == nil {
		return fmt.Errorf("s2.MakeDict of %d bytes: no dictionary", len(content))
	}
	if err := os.WriteFile(filepath.Join(*out, "compress_v3.dict"), dict.Bytes(), 0o644); err != nil {
		return err
	}
	// The same content as a Zstandard dictionary, with entropy tables
	// fitted to all of the first set, so that a checkpoint of a few
	// hundred bytes does not pay for tables of its own.
	var contents [][]byte
	for _, s := range dictSet {
		contents = append(contents, []byte(s.Meta))
	}
	zdict, err := zstd.BuildDict(zstd.BuildDictOptions{
		ID:       3,
		Contents: contents,
		History:  content,
		Offsets:  [3]int{1, 4, 8}, // Zstandard's initial repeat offsets
		Level:    zstd.SpeedFastest,
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "compress_v3.zstd"), zdict, 0o644); err != nil {
		return err
	}
	var raw bytes.Buffer
	enc := json.NewEncoder(&raw)
	enc.SetIndent("", "\t")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(testSet); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "testdata", "checkpoints.json"), raw.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("dictionaries of %d (S2) and %d bytes (Zstandard) from %d checkpoints; %d checkpoints for the tests\n",
		len(dict.Bytes()), len(zdict), len(dictSet), len(testSet))
	return nil
}

// runThreads runs one set of threads and returns their checkpoints,
// oldest first within a thread. The threads' names are Slack's, their
// timestamps from second ts.
func runThreads(ctx context.Context, rdb *redis.Client, ts int) (samples []sample, err error) {
	prefix := fmt.Sprintf("metadict-%016x", rand.Uint64())
	c, err := cyclebench.New(cyclebench.Runner, rdb, prefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := cyclebench.Cleanup(ctx, rdb, prefix); err == nil {
			err = cerr
		}
	}()
	store := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	// add adds the thread's checkpoints of its last n/4 turns, the last
	// turn last (or, with last 0, its one checkpoint, paused).
	add := func(thread string, n, last int) error {
		cps, err := store.History(ctx, thread)
		if err != nil {
			return err
		}
		if len(cps) < n {
			return fmt.Errorf("%s has %d checkpoints, want at least %d", thread, len(cps), n)
		}
		for i := n - 1; i >= 0; i-- { // newest first
			cp := cps[i]
			kind, want := "paused", graph.Paused
			if last > 0 {
				step := turn[(n-1-i)%len(turn)]
				kind, want = fmt.Sprintf("turn %d, %s", last-i/len(turn), step.kind), step.status
			}
			if cp.Status != want {
				return fmt.Errorf("%s's checkpoint %d is %s, want %s (%s)", thread, cp.Seq, cp.Status, want, kind)
			}
			meta, err := cp.MarshalMeta()
			if err != nil {
				return err
			}
			samples = append(samples, sample{Kind: kind, Meta: string(meta)})
		}
		return nil
	}
	name := func(i int) string { return fmt.Sprintf("T0TEAM:C0CHANNEL:%d.%06d", ts, 100*i) }
	for i := range 3 {
		if err := c.Pause(ctx, name(i)); err != nil {
			return nil, err
		}
		if err := add(name(i), 1, 0); err != nil {
			return nil, err
		}
	}
	if _, err := c.Cycle(ctx, name(3)); err != nil {
		return nil, err
	}
	if err := add(name(3), 4, 1); err != nil {
		return nil, err
	}
	for range 100 {
		if _, err := c.Cycle(ctx, name(4)); err != nil {
			return nil, err
		}
	}
	if err := add(name(4), 12, 100); err != nil {
		return nil, err
	}
	return samples, nil
}

// firstOf returns the JSON of the first sample of kind.
func firstOf(samples []sample, kind string) ([]byte, error) {
	for _, s := range samples {
		if s.Kind == kind {
			return []byte(s.Meta), nil
		}
	}
	return nil, fmt.Errorf("no checkpoint of kind %q", kind)
}
