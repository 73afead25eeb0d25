// Package graphtest holds tests that any graph.Store must pass. Every store
// implementation runs the same suite from its own tests:
//
//	func TestStoreContract(t *testing.T) {
//		graphtest.TestStore(t, func(t *testing.T) graph.Store {
//			return graph.NewMemoryStore(graph.MemoryOptions{HistoryLimit: graphtest.HistoryLimit})
//		})
//	}
//
// The suite gives every thread a unique name, so several stores (or several
// test binaries) may share one backing server at the same time. It does not
// test anything a store does beyond graph.Store, such as expiry.
package graphtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/interrupt"
)

// HistoryLimit is the history limit the suite expects of the stores that
// newStore returns.
const HistoryLimit = 5

// TestStore runs the graph.Store contract against the stores newStore
// returns. newStore is called once per subtest, possibly from parallel
// subtests; the stores it returns must keep HistoryLimit checkpoints of
// history per thread.
func TestStore(t *testing.T, newStore func(t *testing.T) graph.Store) {
	tests := []struct {
		name string
		run  func(t *testing.T, s graph.Store)
	}{
		{"NoCheckpoint", testNoCheckpoint},
		{"RoundTrip", testRoundTrip},
		{"Statuses", testStatuses},
		{"JournalAppends", testJournalAppends},
		{"StaleSeq", testStaleSeq},
		{"JournalFromMismatch", testJournalFromMismatch},
		{"InconsistentCheckpoint", testInconsistentCheckpoint},
		{"ConcurrentFirstSave", testConcurrentFirstSave},
		{"ConcurrentSaves", testConcurrentSaves},
		{"History", testHistory},
		{"ThreadsIsolated", testThreadsIsolated},
		{"ThreadNames", testThreadNames},
		{"NoAliasing", testNoAliasing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, newStore(t))
		})
	}
}

func testNoCheckpoint(t *testing.T, s graph.Store) {
	ctx := t.Context()
	thread := threadName(t)
	if _, err := s.Load(ctx, thread); !errors.Is(err, graph.ErrNoCheckpoint) {
		t.Errorf("Load(%q) error = %v, want ErrNoCheckpoint", thread, err)
	}
	if _, err := s.History(ctx, thread); !errors.Is(err, graph.ErrNoCheckpoint) {
		t.Errorf("History(%q) error = %v, want ErrNoCheckpoint", thread, err)
	}
	if _, err := s.Journal(ctx, thread, 10); !errors.Is(err, graph.ErrNoCheckpoint) {
		t.Errorf("Journal(%q, 10) error = %v, want ErrNoCheckpoint", thread, err)
	}
}

func testRoundTrip(t *testing.T, s graph.Store) {
	thread := threadName(t)
	created := time.Date(2025, 3, 4, 5, 6, 7, 890123456, time.UTC)
	cp := &graph.Checkpoint{
		Version: graph.SchemaVersion,
		Thread:  thread,
		ID:      "cp-1",
		Parent:  "forked-from",
		Seq:     1,
		Step:    7,
		Status:  graph.Paused,
		Next:    []string{"tools", "model"},
		Queued:  []string{"summarise"},
		Interrupts: []interrupt.Info{
			{
				ID:       "int-1",
				Path:     []string{"tools"},
				Reason:   "approval",
				Payload:  json.RawMessage(`{"calls":[{"id":"call_1","name":"http_request","arguments":"{\"url\":\"https://api.example.com/\"}"}]}`),
				Deadline: created.Add(24 * time.Hour),
			},
			{ID: "int-2", Path: []string{"sub", "tools"}, Reason: "before:tools"},
		},
		Error: "model unavailable: 503",
		Config: graph.RunConfig{
			InterruptBefore: []string{"tools"},
			InterruptAfter:  []string{"model"},
		},
		SkipBefore: []string{"tools"},
		Writes: []graph.Write{
			{Node: "bar", Done: true, State: json.RawMessage(`{"turn":4}`), Journal: []json.RawMessage{json.RawMessage(`{"role":"assistant","content":"bar"}`)}},
			{Node: "baz", State: json.RawMessage(`{"turn":3}`)},
		},
		Arrivals:    map[string][]string{"baz+qux>quux": {"baz"}},
		Nested:      map[string]json.RawMessage{"sub": json.RawMessage(`{"v":2,"status":"paused","journal":[{"n":1}]}`)},
		Fingerprint: &graph.Fingerprint{Graph: "a1b2", Nodes: map[string]string{"tools": "c3"}, Parts: map[string]string{"tool:http_request": "d4"}, StateVersion: 1},
		State:       json.RawMessage(`{"pending":["call_1"],"turn":3,"note":"<a & b>"}`),
		JournalLen:  2,
		Journal: []json.RawMessage{
			json.RawMessage(`{"role":"user","content":"fetch the status page"}`),
			json.RawMessage(`{"role":"assistant","tool_calls":[{"id":"call_1","name":"http_request","arguments":"{}"}]}`),
		},
		Created:   created,
		KeepUntil: created.Add(24 * time.Hour),
	}
	want := cloneCheckpoint(t, cp)
	mustSave(t, s, cp)
	checkUnchanged(t, "Save", cp, want)

	got := mustLoad(t, s, thread)
	checkCheckpoint(t, fmt.Sprintf("Load(%q)", thread), got, want)

	hist := mustHistory(t, s, thread)
	if len(hist) != 1 {
		t.Fatalf("History(%q) returned %d checkpoints, want 1", thread, len(hist))
	}
	checkCheckpoint(t, fmt.Sprintf("History(%q)[0]", thread), hist[0], want.Meta())
}

func testStatuses(t *testing.T, s graph.Store) {
	thread := threadName(t)
	var prev *graph.Checkpoint
	for i, st := range []graph.Status{graph.Running, graph.Paused, graph.Done, graph.Failed} {
		cp := next(thread, prev, fmt.Sprintf("msg %d", i))
		cp.Status = st
		mustSave(t, s, cp)
		if got := mustLoad(t, s, thread); got.Status != st {
			t.Errorf("Load(%q).Status = %v, want %v", thread, got.Status, st)
		}
		prev = cp
	}
	// A failure a retry cannot fix keeps its mark.
	cp := next(thread, prev, "final")
	cp.Status, cp.Error, cp.Final = graph.Failed, "node model: too long", true
	mustSave(t, s, cp)
	if got := mustLoad(t, s, thread); got.Status != graph.Failed || got.Error != cp.Error || !got.Final {
		t.Errorf("Load(%q) = %v %q final %v, want failed %q final", thread, got.Status, got.Error, got.Final, cp.Error)
	}
}

func testJournalAppends(t *testing.T, s graph.Store) {
	ctx := t.Context()
	thread := threadName(t)
	var all []json.RawMessage
	var prev *graph.Checkpoint
	for i, n := range []int{2, 0, 3, 1} {
		var texts []string
		for j := range n {
			texts = append(texts, fmt.Sprintf("save %d entry %d", i, j))
		}
		cp := next(thread, prev, texts...)
		mustSave(t, s, cp)
		all = append(all, cp.Journal...)
		prev = cp

		got := mustLoad(t, s, thread)
		checkCheckpoint(t, fmt.Sprintf("Load(%q) after save %d", thread, i+1), got, full(cp, all))
	}

	for n := 0; n <= len(all)+2; n++ {
		got, err := s.Journal(ctx, thread, n)
		if err != nil {
			t.Fatalf("Journal(%q, %d) error = %v", thread, n, err)
		}
		want := all[:min(n, len(all))]
		if !equalJournals(got, want) {
			t.Errorf("Journal(%q, %d) = %s, want %s", thread, n, journalString(got), journalString(want))
		}
	}
}

func testStaleSeq(t *testing.T, s graph.Store) {
	ctx := t.Context()
	thread := threadName(t)

	stray := next(thread, nil, "hello")
	stray.Seq = 2
	if err := s.Save(ctx, stray); !errors.Is(err, graph.ErrConflict) {
		t.Errorf("Save(seq 2) of a new thread error = %v, want ErrConflict", err)
	}
	if _, err := s.Load(ctx, thread); !errors.Is(err, graph.ErrNoCheckpoint) {
		t.Errorf("Load(%q) after a conflicting first save: error = %v, want ErrNoCheckpoint", thread, err)
	}

	var prev *graph.Checkpoint
	for i := range 3 {
		cp := next(thread, prev, fmt.Sprintf("msg %d", i))
		mustSave(t, s, cp)
		prev = cp
	}
	before := takeSnapshot(t, s, thread)
	for _, seq := range []int64{1, 2, 3, 5} {
		cp := next(thread, prev, "from a stale writer")
		cp.Seq = seq
		cp.ID = "stale"
		if err := s.Save(ctx, cp); !errors.Is(err, graph.ErrConflict) {
			t.Errorf("Save(seq %d) over head seq 3: error = %v, want ErrConflict", seq, err)
		}
	}
	before.check(t, s, "after stale saves")
}

func testJournalFromMismatch(t *testing.T, s graph.Store) {
	ctx := t.Context()
	thread := threadName(t)
	first := next(thread, nil, "a", "b", "c")
	mustSave(t, s, first)
	before := takeSnapshot(t, s, thread)

	tests := []struct {
		name    string
		from    int
		entries []string
	}{
		{"overlapping", 2, []string{"c again", "d"}},
		{"rewriting", 0, []string{"a", "b", "c", "d"}},
		{"leaving a gap", 4, []string{"e"}},
		{"nothing new, from 0", 0, nil},
	}
	for _, tt := range tests {
		cp := next(thread, first, tt.entries...)
		cp.JournalFrom = tt.from
		cp.JournalLen = tt.from + len(tt.entries)
		if err := s.Save(ctx, cp); !errors.Is(err, graph.ErrConflict) {
			t.Errorf("Save(%s: JournalFrom %d) over a journal of 3: error = %v, want ErrConflict", tt.name, tt.from, err)
		}
	}
	before.check(t, s, "after saves with a wrong JournalFrom")
}

func testInconsistentCheckpoint(t *testing.T, s graph.Store) {
	ctx := t.Context()
	thread := threadName(t)
	first := next(thread, nil, "a")
	mustSave(t, s, first)
	before := takeSnapshot(t, s, thread)

	cp := next(thread, first, "b", "c")
	cp.JournalLen = 2 // says one new entry, carries two
	if err := s.Save(ctx, cp); err == nil {
		t.Errorf("Save(JournalLen %d, JournalFrom %d, %d entries) = nil, want an error", cp.JournalLen, cp.JournalFrom, len(cp.Journal))
	}
	before.check(t, s, "after an inconsistent save")
}

func testConcurrentFirstSave(t *testing.T, s graph.Store) {
	thread := threadName(t)
	winner := saveConcurrently(t, s, thread, nil)
	got := mustLoad(t, s, thread)
	checkCheckpoint(t, fmt.Sprintf("Load(%q)", thread), got, winner)
}

func testConcurrentSaves(t *testing.T, s graph.Store) {
	thread := threadName(t)
	first := next(thread, nil, "hello")
	mustSave(t, s, first)

	winner := saveConcurrently(t, s, thread, first)
	got := mustLoad(t, s, thread)
	checkCheckpoint(t, fmt.Sprintf("Load(%q)", thread), got, full(winner, append(slices.Clone(first.Journal), winner.Journal...)))
	if hist := mustHistory(t, s, thread); len(hist) != 2 {
		t.Errorf("History(%q) returned %d checkpoints, want 2", thread, len(hist))
	}
}

// saveConcurrently saves checkpoints that all follow prev from many
// goroutines at once, checks that exactly one succeeded, and returns it.
func saveConcurrently(t *testing.T, s graph.Store, thread string, prev *graph.Checkpoint) *graph.Checkpoint {
	t.Helper()
	const writers = 16
	cps := make([]*graph.Checkpoint, writers)
	errs := make([]error, writers)
	for i := range cps {
		cps[i] = next(thread, prev, fmt.Sprintf("writer %d", i))
		cps[i].ID = fmt.Sprintf("writer-%d", i)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range cps {
		wg.Go(func() {
			<-start
			errs[i] = s.Save(t.Context(), cps[i])
		})
	}
	close(start)
	wg.Wait()

	var winners []int
	for i, err := range errs {
		switch {
		case err == nil:
			winners = append(winners, i)
		case !errors.Is(err, graph.ErrConflict):
			t.Errorf("Save(%s) error = %v, want nil or ErrConflict", cps[i].ID, err)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d concurrent saves of seq %d: %d succeeded (%v), want exactly 1", writers, cps[0].Seq, len(winners), winners)
	}
	return cps[winners[0]]
}

func testHistory(t *testing.T, s graph.Store) {
	thread := threadName(t)
	var saved []*graph.Checkpoint
	var prev *graph.Checkpoint
	for i := range HistoryLimit + 3 {
		cp := next(thread, prev, fmt.Sprintf("msg %d", i))
		mustSave(t, s, cp)
		saved = append(saved, cp)
		prev = cp

		hist := mustHistory(t, s, thread)
		if want := min(i+1, HistoryLimit); len(hist) != want {
			t.Fatalf("History(%q) after %d saves returned %d checkpoints, want %d", thread, i+1, len(hist), want)
		}
	}

	hist := mustHistory(t, s, thread)
	for i, got := range hist {
		want := saved[len(saved)-1-i]
		checkCheckpoint(t, fmt.Sprintf("History(%q)[%d]", thread, i), got, want.Meta())
		if i+1 < len(hist) && got.Parent != hist[i+1].ID {
			t.Errorf("History(%q)[%d].Parent = %q, want the next older checkpoint's ID %q", thread, i, got.Parent, hist[i+1].ID)
		}
	}
}

func testThreadsIsolated(t *testing.T, s graph.Store) {
	a, b := threadName(t)+"-a", threadName(t)+"-b"
	var prevA, prevB *graph.Checkpoint
	for i := range 3 {
		cp := next(a, prevA, fmt.Sprintf("a %d", i), fmt.Sprintf("a %d bis", i))
		mustSave(t, s, cp)
		prevA = cp
	}
	// b starts at seq 1 and journal 0 whatever a holds.
	prevB = next(b, nil, "b 0")
	mustSave(t, s, prevB)

	gotA, gotB := mustLoad(t, s, a), mustLoad(t, s, b)
	if gotA.Seq != 3 || gotA.JournalLen != 6 || len(gotA.Journal) != 6 {
		t.Errorf("Load(%q) = seq %d with %d entries, want seq 3 with 6", a, gotA.Seq, len(gotA.Journal))
	}
	checkCheckpoint(t, fmt.Sprintf("Load(%q)", b), gotB, prevB)
	if hist := mustHistory(t, s, b); len(hist) != 1 {
		t.Errorf("History(%q) returned %d checkpoints, want 1", b, len(hist))
	}
}

func testThreadNames(t *testing.T, s graph.Store) {
	base := threadName(t)
	// Names that a key-value store might confuse if it built keys
	// carelessly: braces, separators, escapes of each other.
	names := []string{
		base + ":T012:C345:1712345678.000100",
		base + "{tag}",
		base + "}{",
		base + "%7Btag%7D",
		base + " spaced/slashed\\ünï",
		base + ":head",
		base,
	}
	for i, name := range names {
		cp := next(name, nil, fmt.Sprintf("thread %d", i))
		cp.ID = fmt.Sprintf("thread-%d", i)
		mustSave(t, s, cp)
	}
	for i, name := range names {
		got := mustLoad(t, s, name)
		if want := fmt.Sprintf("thread-%d", i); got.ID != want || got.Thread != name || got.JournalLen != 1 {
			t.Errorf("Load(%q) = ID %q, thread %q, %d entries; want ID %q, that thread, 1 entry", name, got.ID, got.Thread, got.JournalLen, want)
		}
	}
}

func testNoAliasing(t *testing.T, s graph.Store) {
	ctx := t.Context()
	thread := threadName(t)
	cp := next(thread, nil, "hello", "world")
	cp.Next = []string{"model"}
	cp.Interrupts = []interrupt.Info{{ID: "i", Path: []string{"tools"}, Reason: "approval", Payload: json.RawMessage(`{"x":1}`)}}
	want := cloneCheckpoint(t, cp)
	mustSave(t, s, cp)

	scribble(cp) // the caller reuses its checkpoint after saving it
	got := mustLoad(t, s, thread)
	checkCheckpoint(t, "Load after the saved checkpoint was modified", got, want)

	scribble(got) // the caller modifies what it loaded
	for _, h := range mustHistory(t, s, thread) {
		scribble(h)
	}
	entries, err := s.Journal(ctx, thread, 2)
	if err != nil {
		t.Fatalf("Journal(%q, 2) error = %v", thread, err)
	}
	entries[0][2] = 'X'
	checkCheckpoint(t, "Load after loaded checkpoints were modified", mustLoad(t, s, thread), want)
	checkCheckpoint(t, "History()[0] after loaded checkpoints were modified", mustHistory(t, s, thread)[0], want.Meta())
}

// scribble overwrites what a checkpoint's slices point to.
func scribble(cp *graph.Checkpoint) {
	scribbled := [][]byte{cp.State}
	if len(cp.Journal) > 0 {
		scribbled = append(scribbled, cp.Journal[0])
	}
	for _, b := range scribbled {
		if len(b) > 2 {
			b[2] = 'X'
		}
	}
	if len(cp.Next) > 0 {
		cp.Next[0] = "scribbled"
	}
	if len(cp.Interrupts) > 0 {
		cp.Interrupts[0].Path[0] = "scribbled"
		cp.Interrupts[0].Payload[2] = 'X'
	}
}

// threadName returns a thread name that no other test uses, even in another
// process sharing the same server.
func threadName(t *testing.T) string {
	return fmt.Sprintf("%s-%016x", t.Name(), rand.Uint64())
}

// next returns a checkpoint that follows prev (nil for a thread's first) and
// adds one journal entry per text.
func next(thread string, prev *graph.Checkpoint, texts ...string) *graph.Checkpoint {
	cp := &graph.Checkpoint{
		Version: graph.SchemaVersion,
		Thread:  thread,
		Seq:     1,
		Status:  graph.Running,
		Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	if prev != nil {
		cp.Parent = prev.ID
		cp.Seq = prev.Seq + 1
		cp.JournalFrom = prev.JournalLen
		cp.Created = prev.Created.Add(time.Second)
	}
	cp.ID = fmt.Sprintf("cp-%d", cp.Seq)
	cp.Step = int(cp.Seq)
	cp.Next = []string{"model"}
	cp.State = json.RawMessage(fmt.Sprintf(`{"step":%d}`, cp.Seq))
	for _, text := range texts {
		entry, _ := json.Marshal(map[string]string{"role": "user", "content": text})
		cp.Journal = append(cp.Journal, entry)
	}
	cp.JournalLen = cp.JournalFrom + len(cp.Journal)
	return cp
}

// full returns cp as Load returns it: with the whole journal.
func full(cp *graph.Checkpoint, journal []json.RawMessage) *graph.Checkpoint {
	f := cp.Meta()
	f.Journal = journal
	return f
}

func mustSave(t *testing.T, s graph.Store, cp *graph.Checkpoint) {
	t.Helper()
	if err := s.Save(t.Context(), cp); err != nil {
		t.Fatalf("Save(%s seq %d) error = %v", cp.Thread, cp.Seq, err)
	}
}

func mustLoad(t *testing.T, s graph.Store, thread string) *graph.Checkpoint {
	t.Helper()
	cp, err := s.Load(t.Context(), thread)
	if err != nil {
		t.Fatalf("Load(%q) error = %v", thread, err)
	}
	return cp
}

func mustHistory(t *testing.T, s graph.Store, thread string) []*graph.Checkpoint {
	t.Helper()
	hist, err := s.History(t.Context(), thread)
	if err != nil {
		t.Fatalf("History(%q) error = %v", thread, err)
	}
	return hist
}

// checkCheckpoint compares two checkpoints by their JSON, which is what a
// store keeps, and their journals.
func checkCheckpoint(t *testing.T, what string, got, want *graph.Checkpoint) {
	t.Helper()
	if g, w := metaJSON(got), metaJSON(want); g != w {
		t.Errorf("%s =\n%s\nwant\n%s", what, g, w)
	}
	if got.JournalFrom != want.JournalFrom {
		t.Errorf("%s.JournalFrom = %d, want %d", what, got.JournalFrom, want.JournalFrom)
	}
	if !equalJournals(got.Journal, want.Journal) {
		t.Errorf("%s.Journal = %s, want %s", what, journalString(got.Journal), journalString(want.Journal))
	}
}

// checkUnchanged reports a store that modified the checkpoint it was given.
func checkUnchanged(t *testing.T, what string, cp, want *graph.Checkpoint) {
	t.Helper()
	if metaJSON(cp) != metaJSON(want) || cp.JournalFrom != want.JournalFrom || !equalJournals(cp.Journal, want.Journal) {
		t.Errorf("%s modified its argument", what)
	}
}

func metaJSON(cp *graph.Checkpoint) string {
	b, err := json.Marshal(cp.Meta())
	if err != nil {
		return fmt.Sprintf("unencodable checkpoint: %v", err)
	}
	return string(b)
}

// equalJournals compares entries as JSON values: a store may re-encode them.
func equalJournals(got, want []json.RawMessage) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		var g, w bytes.Buffer
		if json.Compact(&g, got[i]) != nil || json.Compact(&w, want[i]) != nil || g.String() != w.String() {
			return false
		}
	}
	return true
}

func journalString(entries []json.RawMessage) string {
	b, _ := json.Marshal(entries)
	return string(b)
}

// cloneCheckpoint returns a deep copy of cp.
func cloneCheckpoint(t *testing.T, cp *graph.Checkpoint) *graph.Checkpoint {
	t.Helper()
	b, err := json.Marshal(cp)
	if err != nil {
		t.Fatalf("encode checkpoint: %v", err)
	}
	c := new(graph.Checkpoint)
	if err := json.Unmarshal(b, c); err != nil {
		t.Fatalf("decode checkpoint: %v", err)
	}
	c.JournalFrom = cp.JournalFrom
	for _, e := range cp.Journal {
		c.Journal = append(c.Journal, bytes.Clone(e))
	}
	return c
}

// snapshot is what a store returned for a thread at one moment.
type snapshot struct {
	thread  string
	head    *graph.Checkpoint
	history []*graph.Checkpoint
}

func takeSnapshot(t *testing.T, s graph.Store, thread string) snapshot {
	t.Helper()
	return snapshot{thread: thread, head: mustLoad(t, s, thread), history: mustHistory(t, s, thread)}
}

// check reports any difference between the store's thread now and the
// snapshot.
func (snap snapshot) check(t *testing.T, s graph.Store, when string) {
	t.Helper()
	now := takeSnapshot(t, s, snap.thread)
	checkCheckpoint(t, fmt.Sprintf("Load(%q) %s", snap.thread, when), now.head, snap.head)
	if len(now.history) != len(snap.history) {
		t.Fatalf("History(%q) %s returned %d checkpoints, want %d", snap.thread, when, len(now.history), len(snap.history))
	}
	for i := range now.history {
		checkCheckpoint(t, fmt.Sprintf("History(%q)[%d] %s", snap.thread, i, when), now.history[i], snap.history[i])
	}
}
