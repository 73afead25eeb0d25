package redisstore_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/internal/cyclebench"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

var metaDictOut = flag.String("metadict.write", "",
	"TestWriteMetaDict: write compress_v3.dict and testdata/checkpoints.json under this directory")

// metaSample is a checkpoint's JSON as a save compresses it, and what
// kind of checkpoint it is: "paused" (a new thread paused on an
// approval), then, of a thread's turn 1 or turn 100, "paused", "claim"
// (the approved call, running), "outcome" (the tool's result taken) and
// "answer" (done).
type metaSample struct {
	Kind string `json:"kind"`
	Meta string `json:"meta"`
}

// metaSamplesPath holds checkpoints written with the dictionary, in
// another run than the one the dictionary was built from: what the
// compression tests and benchmarks read.
const metaSamplesPath = "testdata/checkpoints.json"

// TestWriteMetaDict is how the dictionary of metaS2V3 was built. With
// -metadict.write DIR (and REDIS_URL, or a redis-server on PATH) it runs
// threads through the bot's own wiring (bot.New, with cyclebench's
// scripted model and tool) and takes the checkpoints they saved from
// their history, in two sets run one after the other, each with IDs and
// times of its own:
//
//   - from the first, it makes the dictionary (s2.MakeDict) and writes
//     it to DIR/compress_v3.dict: a turn-100 answer, a turn-1 claim, a
//     turn-100 pause and a new thread's pause, the nearest last, their
//     times replaced by one of no day;
//   - the second it writes to DIR/testdata/checkpoints.json, for the
//     tests and benchmarks.
//
// Each set: three new threads left paused on an approval, a thread's
// first cycle (pause, claim, outcome, answer), and the last three cycles
// of a thread of 100. Without the flag it is skipped. The dictionary
// must never change once checkpoints are stored with it: running this
// again writes another one (other IDs), which needs a new marker.
//
//	bash .ci/with-redis go test -count=1 -run TestWriteMetaDict ./redisstore/ -metadict.write "$PWD/redisstore"
func TestWriteMetaDict(t *testing.T) {
	if *metaDictOut == "" {
		t.Skip("writes the dictionary only with -metadict.write DIR")
	}
	dictSet := runMetaSamples(t, 1700000000)
	benchSet := runMetaSamples(t, 1764150000)

	var content []byte
	for _, want := range []string{"turn 100, answer", "turn 1, claim", "turn 100, paused", "paused"} {
		content = append(content, firstOf(t, dictSet, want)...)
	}
	// The times of the day the dictionary was made would match only
	// checkpoints of that day; one of no day matches none, and leaves
	// the matches to what every checkpoint has.
	content = timestamp.ReplaceAll(content, []byte(noDay))
	// A block's first match is most likely the start of a checkpoint:
	// the repeat offset points there.
	dict := s2.MakeDict(content, []byte(`{"v":2,"thread":"`))
	if dict == nil {
		t.Fatalf("s2.MakeDict of %d bytes: no dictionary", len(content))
	}
	if err := os.WriteFile(filepath.Join(*metaDictOut, "compress_v3.dict"), dict.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := json.MarshalIndent(benchSet, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*metaDictOut, metaSamplesPath), append(raw, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dictionary of %d bytes; %d checkpoints for the tests", len(dict.Bytes()), len(benchSet))
}

// runMetaSamples runs one set of threads (see TestWriteMetaDict) and
// returns their checkpoints, oldest first within a thread. The threads'
// names are Slack's, with their timestamps from second ts.
func runMetaSamples(t *testing.T, ts int) []metaSample {
	ctx := context.Background()
	rdb := redistest.Client(t)
	prefix := uniqueName("metadict")
	c, err := cyclebench.New(cyclebench.Runner, rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cyclebench.Cleanup(ctx, rdb.(*redis.Client), prefix) })
	store := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	var samples []metaSample
	// add adds the thread's checkpoints of its last n/4 turns (or its
	// last, with n 1), of turn last and those before.
	add := func(thread string, n, last int) {
		cps, err := store.History(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		if len(cps) < n {
			t.Fatalf("%s has %d checkpoints, want at least %d", thread, len(cps), n)
		}
		for i := n - 1; i >= 0; i-- {
			cp := cps[i]
			meta, err := cp.MarshalMeta()
			if err != nil {
				t.Fatal(err)
			}
			kind, want := "paused", graph.Paused
			if last > 0 {
				step := turn[(n-1-i)%len(turn)]
				kind, want = fmt.Sprintf("turn %d, %s", last-i/len(turn), step.kind), step.status
			}
			if cp.Status != want {
				t.Fatalf("%s's checkpoint %d is %s, want %s (%s)", thread, cp.Seq, cp.Status, want, kind)
			}
			samples = append(samples, metaSample{Kind: kind, Meta: string(meta)})
		}
	}
	name := func(i int) string { return fmt.Sprintf("T0TEAM:C0CHANNEL:%d.%06d", ts, 100*i) }
	for i := range 3 {
		if err := c.Pause(ctx, name(i)); err != nil {
			t.Fatal(err)
		}
		add(name(i), 1, 0)
	}
	if _, err := c.Cycle(ctx, name(3)); err != nil {
		t.Fatal(err)
	}
	add(name(3), 4, 1)
	for range 100 {
		if _, err := c.Cycle(ctx, name(4)); err != nil {
			t.Fatal(err)
		}
	}
	add(name(4), 12, 100)
	return samples
}

// timestamp matches a time as a checkpoint's JSON holds it.
var timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

const noDay = "2000-01-01T00:00:00.000000000Z"

// turn is what a turn saves, in order.
var turn = []struct {
	kind   string
	status graph.Status
}{{"paused", graph.Paused}, {"claim", graph.Running}, {"outcome", graph.Running}, {"answer", graph.Done}}

// firstOf returns the JSON of the first sample of kind.
func firstOf(tb testing.TB, samples []metaSample, kind string) []byte {
	tb.Helper()
	for _, s := range samples {
		if s.Kind == kind {
			return []byte(s.Meta)
		}
	}
	tb.Fatalf("no checkpoint of kind %q", kind)
	return nil
}
