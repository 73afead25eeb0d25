package redisstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	kflate "github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore/redistest"
)

var updateStored = flag.Bool("compress.update", false,
	"TestStoredCheckpointsRead: rewrite "+storedPath+" (only when a new stored form is added)")

// storedPath holds checkpoints as each version stored them: golden bytes
// that must read back whatever the code that writes becomes.
const storedPath = "testdata/stored-checkpoints.json"

// storedCheckpoint is a checkpoint's JSON and its stored forms, by
// marker ("plain" for JSON stored as it is).
type storedCheckpoint struct {
	Kind   string            `json:"kind"`
	Meta   string            `json:"meta"`
	Stored map[string][]byte `json:"stored"`
}

// checkpointSample is one of testdata/checkpoints.json: checkpoints that
// the bot's wiring saved, written with the dictionary by the program
// internal/metadict, from other threads than those it was made of.
type checkpointSample struct {
	Kind string `json:"kind"`
	Meta string `json:"meta"`
}

func readCheckpointSamples(tb testing.TB) []checkpointSample {
	tb.Helper()
	raw, err := os.ReadFile("testdata/checkpoints.json")
	if err != nil {
		tb.Fatal(err)
	}
	var samples []checkpointSample
	if err := json.Unmarshal(raw, &samples); err != nil {
		tb.Fatalf("testdata/checkpoints.json: %v", err)
	}
	return samples
}

// checkpointOf returns the JSON of the first sample of kind.
func checkpointOf(tb testing.TB, samples []checkpointSample, kind string) []byte {
	tb.Helper()
	for _, s := range samples {
		if s.Kind == kind {
			return []byte(s.Meta)
		}
	}
	tb.Fatalf("testdata/checkpoints.json has no checkpoint of kind %q", kind)
	return nil
}

// deflateV2 is how checkpoints were stored before metaS2V3 and
// metaZstdV3: DEFLATE
// level 5 with the end of metaDictV2 (what the writers knew), read with
// the whole of it. It writes a new writer each time: for the tests and
// the benchmarks' comparison only.
func deflateV2(tb testing.TB, w *kflate.Writer, meta []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(meta)/2 + 16)
	out.WriteByte(metaFlateV2)
	w.Reset(&out)
	if _, err := w.Write(meta); err != nil || w.Close() != nil {
		tb.Fatalf("deflate: %v", err)
	}
	return out.Bytes()
}

// zstdV3Encoder writes what earlier versions wrote for a paused
// checkpoint (metaZstdV3): Zstandard at its fastest level with
// metaZstdDictV3, no checksum, one segment. For the tests and the
// benchmarks' comparison only: the store reads the format, and no longer
// writes it.
var zstdV3Encoder = mustZstd(zstd.NewWriter(nil,
	zstd.WithEncoderDict(metaZstdDictV3),
	zstd.WithEncoderLevel(zstd.SpeedFastest),
	zstd.WithEncoderCRC(false),
	zstd.WithSingleSegment(true),
	zstd.WithEncoderConcurrency(1),
	zstd.WithLowerEncoderMem(true)))

// zstdV3 returns meta stored as earlier versions stored a paused
// checkpoint (metaZstdV3): the frame without its magic number, after the
// marker.
func zstdV3(tb testing.TB, meta []byte) []byte {
	frame := zstdV3Encoder.EncodeAll(meta, nil)
	if len(frame) < len(zstdMagic) || string(frame[:len(zstdMagic)]) != zstdMagic {
		tb.Fatalf("zstd wrote %q, not a frame", frame)
	}
	return append([]byte{metaZstdV3}, frame[len(zstdMagic):]...)
}

func newDeflateV2(tb testing.TB) *kflate.Writer {
	w, err := kflate.NewWriterDict(nil, 5, []byte(metaDictV2[len(metaDictV1):]))
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// Every form a checkpoint was ever stored in reads back, byte for byte:
// plain JSON (before compression), DEFLATE with the first and the second
// dictionary, and S2 and Zstandard with the third. The golden bytes were
// written by the code of their time; -compress.update rewrites the file
// with what the code writes now, for a new form only.
func TestStoredCheckpointsRead(t *testing.T) {
	t.Parallel()
	if *updateStored {
		writeStoredCheckpoints(t)
	}
	raw, err := os.ReadFile(storedPath)
	if err != nil {
		t.Fatal(err)
	}
	var golden []storedCheckpoint
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatalf("%s: %v", storedPath, err)
	}
	forms := map[string]int{}
	for _, g := range golden {
		for form, stored := range g.Stored {
			forms[form]++
			got, err := expandMeta(stored)
			if err != nil || string(got) != g.Meta {
				t.Errorf("expandMeta(%s checkpoint stored as %s) = %q, %v; want %q", g.Kind, form, got, err, g.Meta)
			}
		}
	}
	for _, form := range []string{"plain", "v1", "v2", "v3-s2", "v3-zstd"} {
		if forms[form] == 0 {
			t.Errorf("%s holds no checkpoint stored as %s", storedPath, form)
		}
	}
}

func writeStoredCheckpoints(t *testing.T) {
	samples := readCheckpointSamples(t)
	w1, err := kflate.NewWriterDict(nil, 5, []byte(metaDictV1))
	if err != nil {
		t.Fatal(err)
	}
	w2 := newDeflateV2(t)
	var golden []storedCheckpoint
	for _, kind := range []string{"paused", "turn 1, claim", "turn 100, answer"} {
		meta := checkpointOf(t, samples, kind)
		v1 := deflateV2(t, w1, meta)
		v1[0] = metaFlateV1
		s2, zstd := compressMeta(meta), zstdV3(t, meta)
		if s2[0] != metaS2V3 {
			t.Fatalf("compressMeta(%s) is stored as %#x, want metaS2V3", kind, s2[0])
		}
		golden = append(golden, storedCheckpoint{Kind: kind, Meta: string(meta), Stored: map[string][]byte{
			"plain": meta, "v1": v1, "v2": deflateV2(t, w2, meta), "v3-s2": s2, "v3-zstd": zstd,
		}})
	}
	raw, err := json.MarshalIndent(golden, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(storedPath, append(raw, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The dictionaries embedded read as such, Zstandard's with the ID its
// frames carry, and hold the same content.
func TestMetaDictV3(t *testing.T) {
	t.Parallel()
	if metaDictV3 == nil {
		t.Fatalf("compress_v3.dict (%d bytes) is not an S2 dictionary", len(metaDictV3Bytes))
	}
	d, err := zstd.InspectDictionary(metaZstdDictV3)
	if err != nil {
		t.Fatalf("InspectDictionary(compress_v3.zstd) = %v", err)
	}
	if d.ID() != metaZstdDictV3ID {
		t.Errorf("compress_v3.zstd has ID %d, want %d", d.ID(), metaZstdDictV3ID)
	}
	_, n := binary.Uvarint(metaDictV3Bytes)
	if !bytes.Equal(d.Content(), metaDictV3Bytes[n:]) {
		t.Errorf("compress_v3.zstd holds %d bytes that are not compress_v3.dict's %d", len(d.Content()), len(metaDictV3Bytes[n:]))
	}
}

// Checkpoints of each kind a thread saves are stored with S2, smaller
// than with DEFLATE and the second dictionary, and read back exactly; a
// new thread's paused checkpoint (1,018 bytes of JSON), the one kept for
// days, in at most 150 bytes (about 200 with DEFLATE, 128 with the
// Zstandard that earlier versions wrote for it).
func TestCheckpointsCompressed(t *testing.T) {
	t.Parallel()
	w := newDeflateV2(t)
	for _, s := range readCheckpointSamples(t) {
		meta := []byte(s.Meta)
		stored := compressMeta(meta)
		before := len(deflateV2(t, w, meta))
		t.Logf("%-18s %5d bytes of JSON, stored in %4d (%d with DEFLATE, %d with Zstandard)", s.Kind, len(meta), len(stored), before, len(zstdV3(t, meta)))
		if got, err := expandMeta(stored); err != nil || !bytes.Equal(got, meta) {
			t.Errorf("expandMeta(compressMeta(%s)) = %q, %v", s.Kind, got, err)
		}
		if stored[0] != metaS2V3 || len(stored) > before {
			t.Errorf("%s checkpoint stored in %d bytes with marker %#x; want %#x in at most %d", s.Kind, len(stored), stored[0], metaS2V3, before)
		}
		if s.Kind == "paused" && len(stored) > 150 {
			t.Errorf("a paused checkpoint of %d bytes is stored in %d; want at most 150", len(meta), len(stored))
		}
	}
}

// A thread paused by an earlier version, its checkpoint stored with
// Zstandard, loads as it was saved, resumes (the next save is made on top
// of it, with S2), and its history reads both forms.
func TestPausedCheckpointOfEarlierVersionsLoads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := New(redistest.Client(t), Options{Prefix: fmt.Sprintf("zstd-%016x", rand.Uint64())})
	thread := "T0:C0:1700000000.000100"
	paused := &graph.Checkpoint{
		Version: graph.SchemaVersion, Thread: thread, ID: "cp-paused", Seq: 1, Status: graph.Paused,
		Next:    []string{"tools"},
		State:   json.RawMessage(`{"thread":"T0:C0:1700000000.000100","calls":[{"key":"0.0","tool":"http_request","status":"pending"}]}`),
		Journal: []json.RawMessage{json.RawMessage(`{"role":"user","content":"is status.example.com healthy?"}`)}, JournalLen: 1,
		Created: time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC),
	}
	if err := store.Save(ctx, paused); err != nil {
		t.Fatal(err)
	}
	k, err := store.keys(thread)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := store.rdb.LIndex(ctx, k.history, 0).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if stored[0] != metaS2V3 {
		t.Fatalf("a paused checkpoint is stored with marker %#x, want metaS2V3 (%#x)", stored[0], metaS2V3)
	}
	meta, err := expandMeta(stored)
	if err != nil {
		t.Fatal(err)
	}
	// As an earlier version stored it.
	if err := store.rdb.LSet(ctx, k.history, 0, zstdV3(t, meta)).Err(); err != nil {
		t.Fatal(err)
	}

	// Another replica, which has not seen the thread, loads it.
	other := New(store.rdb, Options{Prefix: store.prefix})
	got, err := other.Load(ctx, thread)
	if err != nil {
		t.Fatalf("Load(a checkpoint stored with Zstandard) = %v", err)
	}
	if got.ID != paused.ID || got.Status != graph.Paused || string(got.State) != string(paused.State) || len(got.Journal) != 1 {
		t.Fatalf("Load = %s %s %s with %d entries; want %s paused %s with 1", got.ID, got.Status, got.State, len(got.Journal), paused.ID, paused.State)
	}
	next := &graph.Checkpoint{
		Version: graph.SchemaVersion, Thread: thread, ID: "cp-running", Parent: got.ID, Seq: 2, Status: graph.Running,
		State:       json.RawMessage(`{"thread":"T0:C0:1700000000.000100","calls":[{"key":"0.0","tool":"http_request","status":"running"}]}`),
		JournalFrom: 1, JournalLen: 1, Created: time.Date(2026, 11, 20, 9, 1, 0, 0, time.UTC),
	}
	if err := other.Save(ctx, next); err != nil {
		t.Fatalf("Save on top of a checkpoint stored with Zstandard = %v", err)
	}
	history, err := other.History(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	if len(history) != 2 || history[0].ID != next.ID || history[1].ID != paused.ID || string(history[1].State) != string(paused.State) {
		t.Fatalf("History = %d checkpoints; want %s, then %s as it was saved", len(history), next.ID, paused.ID)
	}
}

// What compresses badly is stored as it is, never larger; so is what
// compresses to nothing.
func TestIncompressibleCheckpointStoredAsIs(t *testing.T) {
	t.Parallel()
	noise := make([]byte, 64)
	for i, x := 0, uint32(1); i < len(noise); i++ {
		x = x*1664525 + 1013904223
		noise[i] = byte(x >> 24)
	}
	for _, meta := range [][]byte{nil, []byte(`{}`), noise} {
		if got := compressMeta(meta); !bytes.Equal(got, meta) {
			t.Errorf("compressMeta(%q) = %q, want it as it is", meta, got)
		}
	}
}

// A stored block or frame that claims more than metaMax of JSON is
// refused without the memory being taken; such JSON is stored as it is.
func TestExpandRefusesOversized(t *testing.T) {
	t.Parallel()
	block := binary.AppendUvarint([]byte{metaS2V3}, metaMax+1)
	block = append(block, 0x00, 0x7b, 0x7d)
	if got, err := expandMeta(block); err == nil {
		t.Errorf("expandMeta(a block of %d bytes of JSON) = %d bytes, want an error", metaMax+1, len(got))
	}
	big := bytes.Repeat([]byte(`{"calls":[]}`), metaMax/12+1)
	if got, err := expandMeta(zstdV3(t, big)); err == nil {
		t.Errorf("expandMeta(a frame of %d bytes of JSON) = %d bytes, want an error", len(big), len(got))
	}
	if got := compressMeta(big); !bytes.Equal(got, big) {
		t.Errorf("compressMeta(%d bytes) stored in %d bytes, want as it is", len(big), len(got))
	}
}

// FuzzExpandMeta: whatever a history entry holds, reading it never
// panics, and what was compressed reads back exactly; plain JSON written
// before compression reads back as it is.
func FuzzExpandMeta(f *testing.F) {
	f.Add([]byte(`{"v":1,"thread":"T1:C1:1700000000.000100","id":"a","seq":1,"status":"paused","state":{}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte{metaFlateV1})
	f.Add([]byte{metaFlateV1, 0xff, 0x00})
	f.Add([]byte{metaFlateV2})
	f.Add([]byte{metaS2V3})
	f.Add([]byte{metaS2V3, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{metaZstdV3})
	f.Add([]byte{metaZstdV3, 0x23, 0x03, 0xff, 0xff, 0xff, 0x7f})
	f.Add(compressMeta([]byte(`{"v":1,"thread":"x","state":{"calls":[{"key":"0.0","status":"pending"}]}}`)))
	f.Add(zstdV3(f, []byte(`{"v":1,"thread":"x","state":{"calls":[{"key":"0.0","status":"pending"}]}}`)))
	if raw, err := os.ReadFile(storedPath); err == nil {
		var golden []storedCheckpoint
		if json.Unmarshal(raw, &golden) == nil {
			for _, g := range golden {
				for _, stored := range g.Stored {
					f.Add(stored)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = expandMeta(data)
		if len(data) > 0 && data[0] >= metaFlateV1 && data[0] <= metaZstdV3 {
			return
		}
		stored := compressMeta(data)
		if got, err := expandMeta(stored); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("expandMeta(compressMeta(%q)) = %q, %v", data, got, err)
		}
		// What earlier versions wrote for a paused checkpoint reads back too.
		if len(data) > 0 {
			if got, err := expandMeta(zstdV3(t, data)); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("expandMeta(zstdV3(%q)) = %q, %v", data, got, err)
			}
		}
	})
}

// BenchmarkCompressMeta measures a checkpoint's compression (on a save's
// path) and expansion (on a load's) as they are now ("v3": S2 with the
// third dictionary)
// and as they were (deflate-v2: DEFLATE with the second, the writer's
// Reset with its dictionary included, which ran on a goroutine of its
// own), for a new thread's paused checkpoint, the claim of turn 1
// (running) and the claim of turn 100; the paused one with the
// Zstandard that earlier versions wrote for it too (zstd-v3), for
// comparison. Metrics: ns/op, B/op, allocs/op and
// stored-bytes; "alternated" runs v3 and deflate-v2 in turn, so that both
// see the same machine, and reports ns/v3, ns/deflate-v2 and their ratio
// v3-x-deflate.
func BenchmarkCompressMeta(b *testing.B) {
	samples := readCheckpointSamples(b)
	for _, kind := range []string{"paused", "turn 1, claim", "turn 100, claim"} {
		meta := checkpointOf(b, samples, kind)
		name := map[string]string{"paused": "paused", "turn 1, claim": "turn=1", "turn 100, claim": "turn=100"}[kind]
		paused := kind == "paused"
		w := newDeflateV2(b)
		old := deflateV2(b, w, meta)
		stored := compressMeta(meta)
		b.Run(fmt.Sprintf("%s/compress/v3", name), func(b *testing.B) {
			for b.Loop() {
				compressMeta(meta)
			}
			b.ReportMetric(float64(len(stored)), "stored-bytes")
		})
		if paused {
			b.Run(fmt.Sprintf("%s/compress/zstd-v3", name), func(b *testing.B) {
				for b.Loop() {
					zstdV3(b, meta)
				}
				b.ReportMetric(float64(len(zstdV3(b, meta))), "stored-bytes")
			})
		}
		b.Run(fmt.Sprintf("%s/compress/deflate-v2", name), func(b *testing.B) {
			for b.Loop() {
				deflateV2(b, w, meta)
			}
			b.ReportMetric(float64(len(old)), "stored-bytes")
		})
		b.Run(fmt.Sprintf("%s/compress/alternated", name), func(b *testing.B) {
			alternate(b, func() { compressMeta(meta) }, func() { deflateV2(b, w, meta) })
		})
		b.Run(fmt.Sprintf("%s/expand/v3", name), func(b *testing.B) {
			for b.Loop() {
				if _, err := expandMeta(stored); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("%s/expand/deflate-v2", name), func(b *testing.B) {
			for b.Loop() {
				if _, err := expandMeta(old); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("%s/expand/alternated", name), func(b *testing.B) {
			alternate(b, func() { _, _ = expandMeta(stored) }, func() { _, _ = expandMeta(old) })
		})
	}
}

// alternate times v3 and deflate one after the other, each first in
// turn, and reports each one's time and their ratio (v3-x-deflate: what
// is written now ÷ what was).
func alternate(b *testing.B, v3, deflate func()) {
	var ts, td time.Duration
	i := 0
	for b.Loop() {
		t0 := time.Now()
		if i%2 == 0 {
			v3()
			t1 := time.Now()
			deflate()
			ts, td = ts+t1.Sub(t0), td+time.Since(t1)
		} else {
			deflate()
			t1 := time.Now()
			v3()
			td, ts = td+t1.Sub(t0), ts+time.Since(t1)
		}
		i++
	}
	b.ReportMetric(float64(ts.Nanoseconds())/float64(i), "ns/v3")
	b.ReportMetric(float64(td.Nanoseconds())/float64(i), "ns/deflate-v2")
	b.ReportMetric(float64(ts)/float64(td), "v3-x-deflate")
}
