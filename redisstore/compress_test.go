package redisstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	kflate "github.com/klauspost/compress/flate"
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

// deflateV2 is how checkpoints were stored before metaS2V3: DEFLATE
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

func newDeflateV2(tb testing.TB) *kflate.Writer {
	w, err := kflate.NewWriterDict(nil, 5, []byte(metaDictV2[len(metaDictV1):]))
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// Every form a checkpoint was ever stored in reads back, byte for byte:
// plain JSON (before compression), DEFLATE with the first and the second
// dictionary, and S2 with the third. The golden bytes were
// written by the code of their time; -compress.update rewrites the file
// with what the code writes now, for a new form only.
func TestStoredCheckpointsRead(t *testing.T) {
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
	for _, form := range []string{"plain", "v1", "v2", "v3"} {
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
		v3 := compressMeta(meta)
		if v3[0] != metaS2V3 {
			t.Fatalf("compressMeta(%s) is stored as %#x, want metaS2V3", kind, v3[0])
		}
		golden = append(golden, storedCheckpoint{Kind: kind, Meta: string(meta), Stored: map[string][]byte{
			"plain": meta, "v1": v1, "v2": deflateV2(t, w2, meta), "v3": v3,
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

// The dictionary embedded reads as one.
func TestMetaDictV3(t *testing.T) {
	if metaDictV3 == nil {
		t.Fatalf("compress_v3.dict (%d bytes) is not an S2 dictionary", len(metaDictV3Bytes))
	}
}

// Checkpoints of each kind a thread saves are stored smaller than with
// DEFLATE and the second dictionary, and read back exactly; a paused
// thread's checkpoint (1,018 bytes of JSON), the one kept for days, in
// at most 150 bytes (about 200 with DEFLATE).
func TestCheckpointsCompressed(t *testing.T) {
	w := newDeflateV2(t)
	for _, s := range readCheckpointSamples(t) {
		meta := []byte(s.Meta)
		stored := compressMeta(meta)
		before := len(deflateV2(t, w, meta))
		t.Logf("%-18s %5d bytes of JSON, stored in %4d (%d with DEFLATE)", s.Kind, len(meta), len(stored), before)
		if got, err := expandMeta(stored); err != nil || !bytes.Equal(got, meta) {
			t.Errorf("expandMeta(compressMeta(%s)) = %q, %v", s.Kind, got, err)
		}
		if stored[0] != metaS2V3 || len(stored) > before {
			t.Errorf("%s checkpoint stored in %d bytes with marker %#x; want metaS2V3 in at most %d", s.Kind, len(stored), stored[0], before)
		}
		if s.Kind == "paused" && len(stored) > 150 {
			t.Errorf("a paused checkpoint of %d bytes is stored in %d; want at most 150", len(meta), len(stored))
		}
	}
}

// What compresses badly is stored as it is, never larger; so is what
// compresses to nothing.
func TestIncompressibleCheckpointStoredAsIs(t *testing.T) {
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

// A stored block that claims more than metaS2Max of JSON is refused
// without the memory being taken; such JSON is stored as it is.
func TestExpandRefusesOversizedBlock(t *testing.T) {
	stored := binary.AppendUvarint([]byte{metaS2V3}, metaS2Max+1)
	stored = append(stored, 0x00, 0x7b, 0x7d)
	if got, err := expandMeta(stored); err == nil {
		t.Errorf("expandMeta(a block of %d bytes of JSON) = %d bytes, want an error", metaS2Max+1, len(got))
	}
	big := bytes.Repeat([]byte(`{"calls":[]}`), metaS2Max/12+1)
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
	f.Add(compressMeta([]byte(`{"v":1,"thread":"x","state":{"calls":[{"key":"0.0","status":"pending"}]}}`)))
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
		if len(data) > 0 && (data[0] == metaFlateV1 || data[0] == metaFlateV2 || data[0] == metaS2V3) {
			return
		}
		stored := compressMeta(data)
		got, err := expandMeta(stored)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("expandMeta(compressMeta(%q)) = %q, %v", data, got, err)
		}
	})
}

// BenchmarkCompressMeta measures a checkpoint's compression (on a save's
// path) and expansion (on a load's), with S2 and the third
// dictionary (what is written) and with DEFLATE and the second
// (deflate-v2: what was, the writer's Reset with its dictionary, which
// ran on a goroutine of its own, included), for a new thread's paused
// checkpoint, the claim of turn 1 (running) and the claim of turn 100.
// Metrics: ns/op, B/op, allocs/op and stored-bytes; "alternated" runs
// the two in turn, so that both see the same machine, and reports
// ns/s2-v3, ns/deflate-v2 and their ratio s2-x-deflate.
func BenchmarkCompressMeta(b *testing.B) {
	samples := readCheckpointSamples(b)
	for _, kind := range []string{"paused", "turn 1, claim", "turn 100, claim"} {
		meta := checkpointOf(b, samples, kind)
		name := map[string]string{"paused": "paused", "turn 1, claim": "turn=1", "turn 100, claim": "turn=100"}[kind]
		w := newDeflateV2(b)
		old := deflateV2(b, w, meta)
		stored := compressMeta(meta)
		b.Run(fmt.Sprintf("%s/compress/s2-v3", name), func(b *testing.B) {
			for b.Loop() {
				compressMeta(meta)
			}
			b.ReportMetric(float64(len(stored)), "stored-bytes")
		})
		b.Run(fmt.Sprintf("%s/compress/deflate-v2", name), func(b *testing.B) {
			for b.Loop() {
				deflateV2(b, w, meta)
			}
			b.ReportMetric(float64(len(old)), "stored-bytes")
		})
		b.Run(fmt.Sprintf("%s/compress/alternated", name), func(b *testing.B) {
			alternate(b, func() { compressMeta(meta) }, func() { deflateV2(b, w, meta) })
		})
		b.Run(fmt.Sprintf("%s/expand/s2-v3", name), func(b *testing.B) {
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

// alternate times s2 and deflate one after the other, each first in
// turn, and reports each one's time and their ratio (s2-x-deflate: what
// is written now ÷ what was).
func alternate(b *testing.B, s2, deflate func()) {
	var ts, td time.Duration
	i := 0
	for b.Loop() {
		t0 := time.Now()
		if i%2 == 0 {
			s2()
			t1 := time.Now()
			deflate()
			ts, td = ts+t1.Sub(t0), td+time.Since(t1)
		} else {
			deflate()
			t1 := time.Now()
			s2()
			td, ts = td+t1.Sub(t0), ts+time.Since(t1)
		}
		i++
	}
	b.ReportMetric(float64(ts.Nanoseconds())/float64(i), "ns/s2-v3")
	b.ReportMetric(float64(td.Nanoseconds())/float64(i), "ns/deflate-v2")
	b.ReportMetric(float64(ts)/float64(td), "s2-x-deflate")
}
