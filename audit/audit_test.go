package audit_test

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/countersign/countersign/audit"
)

// chain seals n entries, each a decision on its own call, after legacy
// entries without a hash.
func chain(t testing.TB, legacy, n int) ([]audit.Entry, audit.Head) {
	t.Helper()
	var out []audit.Entry
	for i := range legacy {
		out = append(out, audit.Entry{ID: fmt.Sprintf("1700000000000-%d", i), Fields: map[string]string{"decision": "approve", "hash": "abc"}})
	}
	var head audit.Head
	for i := range n {
		fields, next, err := audit.Seal(map[string]string{
			"event": "decision", "decision": "approve", "by": "U1", "call": fmt.Sprintf("0.%d", i), "reason": "",
		}, head)
		if err != nil {
			t.Fatal(err)
		}
		head = next
		out = append(out, audit.Entry{ID: fmt.Sprintf("1700000001000-%d", i), Fields: fields})
	}
	return out, head
}

func verify(entries []audit.Entry, head *audit.Head) (audit.Report, error) {
	var v audit.Verifier
	for _, e := range entries {
		if err := v.Add(e); err != nil {
			return v.Finish(head)
		}
	}
	return v.Finish(head)
}

func TestSealChainsEntries(t *testing.T) {
	entries, head := chain(t, 0, 3)
	if head.Seq != 3 || head.Hash != entries[2].Fields["hash"] {
		t.Errorf("head = %+v; want seq 3 and the last entry's hash", head)
	}
	if _, ok := entries[0].Fields["prev"]; ok {
		t.Errorf("first entry %v has a prev", entries[0].Fields)
	}
	if entries[1].Fields["prev"] != entries[0].Fields["hash"] {
		t.Errorf("second entry's prev %q is not the first's hash %q", entries[1].Fields["prev"], entries[0].Fields["hash"])
	}
	if _, ok := entries[0].Fields["reason"]; ok {
		t.Errorf("empty field kept: %v", entries[0].Fields)
	}
	for _, name := range []string{"hash", "prev", "seq", "id", "time"} {
		if _, _, err := audit.Seal(map[string]string{name: "x"}, head); !errors.Is(err, audit.ErrReservedField) {
			t.Errorf("Seal with field %q = %v, want ErrReservedField", name, err)
		}
	}
}

// The canonical encoding is documented byte for byte: a verifier in
// another language depends on it.
func TestCanonicalIsDocumented(t *testing.T) {
	got := string(audit.Canonical(map[string]string{"seq": "1", "event": "decision", "by": "U1", "hash": "ignored"}))
	want := "countersign-audit-v1\n2:by2:U1\n5:event8:decision\n3:seq1:1\n"
	if got != want {
		t.Errorf("Canonical = %q, want %q", got, want)
	}
}

// Every way of tampering with a chain is found, at the entry where it
// happens, and named.
func TestVerifyFindsTampering(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(es []audit.Entry, h *audit.Head) []audit.Entry
		kind   audit.BreakKind
		seq    int64
		detail string
	}{
		{"field changed", func(es []audit.Entry, _ *audit.Head) []audit.Entry {
			es[2].Fields["by"] = "U2"
			return es
		}, audit.Changed, 3, "does not match its hash"},
		{"field added", func(es []audit.Entry, _ *audit.Head) []audit.Entry {
			es[2].Fields["note"] = "x"
			return es
		}, audit.Changed, 3, "does not match its hash"},
		{"entry rewritten with a new hash", func(es []audit.Entry, _ *audit.Head) []audit.Entry {
			es[2].Fields["by"] = "U2"
			es[2].Fields["hash"] = audit.Sum(es[2].Fields)
			return es
		}, audit.Changed, 4, "prev is not the hash of entry 3"},
		{"middle entry deleted", func(es []audit.Entry, _ *audit.Head) []audit.Entry {
			return append(es[:2], es[3:]...)
		}, audit.Missing, 4, "entry 3 is missing"},
		{"two entries swapped", func(es []audit.Entry, _ *audit.Head) []audit.Entry {
			es[1].Fields, es[2].Fields = es[2].Fields, es[1].Fields
			return es
		}, audit.Reordered, 3, "comes before entry 2"},
		{"entry repeated", func(es []audit.Entry, _ *audit.Head) []audit.Entry {
			return append(es[:3], append([]audit.Entry{es[1]}, es[3:]...)...)
		}, audit.Reordered, 2, "comes after entry 3"},
		{"last entry deleted", func(es []audit.Entry, _ *audit.Head) []audit.Entry {
			return es[:4]
		}, audit.Missing, 4, "entry 5 is missing after it"},
		{"first entry deleted", func(es []audit.Entry, _ *audit.Head) []audit.Entry {
			return es[1:]
		}, audit.Missing, 2, "entry 1 is missing before the oldest kept entry"},
		{"entry without a hash inserted", func(es []audit.Entry, _ *audit.Head) []audit.Entry {
			return append(es[:2], append([]audit.Entry{{ID: "x", Fields: map[string]string{"decision": "approve"}}}, es[2:]...)...)
		}, audit.Inserted, 0, "added outside the chain"},
		{"chain started over", func(es []audit.Entry, h *audit.Head) []audit.Entry {
			fields, next, _ := audit.Seal(map[string]string{"event": "decision"}, audit.Head{})
			*h = next
			return append(es, audit.Entry{ID: "y", Fields: fields})
		}, audit.Reordered, 1, "starts over"},
		{"head replaced", func(es []audit.Entry, h *audit.Head) []audit.Entry {
			h.Hash = strings.Repeat("0", 64)
			return es
		}, audit.Changed, 5, "not the head the store records"},
		{"seq not a number", func(es []audit.Entry, _ *audit.Head) []audit.Entry {
			es[2].Fields["seq"] = "three"
			return es
		}, audit.Changed, 0, "not a positive number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries, head := chain(t, 0, 5)
			entries = tt.tamper(entries, &head)
			_, err := verify(entries, &head)
			var b *audit.BreakError
			if !errors.As(err, &b) || b.Kind != tt.kind || b.Seq != tt.seq || !strings.Contains(b.Detail, tt.detail) {
				t.Errorf("verify = %v; want a %s break at seq %d saying %q", err, tt.kind, tt.seq, tt.detail)
			}
		})
	}
}

func TestVerifyAcceptsAnIntactChain(t *testing.T) {
	entries, head := chain(t, 2, 5)
	rep, err := verify(entries, &head)
	if err != nil || rep.Entries != 5 || rep.Before != 2 || rep.First != 1 || rep.Last != (audit.Head{Hash: head.Hash, Seq: 5}) {
		t.Errorf("verify = %+v, %v; want 5 entries after 2 without a hash, up to the head", rep, err)
	}
	// Retention removed the first two: their successor's prev is the
	// anchor, and the head says they were trimmed.
	head.Trimmed = 2
	rep, err = verify(entries[4:], &head)
	if err != nil || rep.Entries != 3 || rep.First != 3 || rep.Trimmed != 2 {
		t.Errorf("verify after retention = %+v, %v; want entries 3 to 5", rep, err)
	}
	// Everything trimmed, or nothing written yet.
	if _, err := verify(nil, &audit.Head{Hash: head.Hash, Seq: 5, Trimmed: 5}); err != nil {
		t.Errorf("verify of a chain trimmed entirely = %v", err)
	}
	if _, err := verify(nil, &audit.Head{}); err != nil {
		t.Errorf("verify of no chain = %v", err)
	}
	if _, err := verify(nil, &audit.Head{Hash: head.Hash, Seq: 5, Trimmed: 3}); err == nil {
		t.Error("verify of a chain whose kept entries are gone passed")
	}
	// An export (no head): the first entry is the anchor.
	if rep, err := verify(entries[4:], nil); err != nil || rep.First != 3 {
		t.Errorf("verify of an export = %+v, %v", rep, err)
	}
}

func TestExportRoundTrip(t *testing.T) {
	entries, _ := chain(t, 1, 3)
	entries[2].Fields["reason"] = "line one\r\nline two, \"quoted\"\n<b>&</b>"
	entries[2].Fields["args"] = `{"url":"https://example.com/?a=1&b=2"}`
	entries[2].Fields["hash"] = audit.Sum(entries[2].Fields) // breaks the chain after it; fine for a round trip
	for _, f := range []audit.Format{audit.JSONL, audit.CSV} {
		t.Run(string(f), func(t *testing.T) {
			var b strings.Builder
			w := audit.NewWriter(&b, f)
			for _, e := range entries {
				if err := w.Write(e); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			got := readAll(t, b.String(), f)
			if len(got) != len(entries) {
				t.Fatalf("read %d entries back, wrote %d:\n%s", len(got), len(entries), b.String())
			}
			for i := range got {
				if got[i].ID != entries[i].ID || !maps.Equal(got[i].Fields, entries[i].Fields) {
					t.Errorf("entry %d read back as %+v, want %+v", i, got[i], entries[i])
				}
			}
			if f == audit.JSONL {
				first := strings.SplitN(b.String(), "\n", 3)[1]
				if !strings.HasPrefix(first, `{"id":"1700000001000-0","time":"2023-11-14T22:13:21Z","seq":"1","event":"decision","call":"0.0","by":"U1",`) ||
					!strings.HasSuffix(first, `,"hash":"`+entries[1].Fields["hash"]+`"}`) {
					t.Errorf("JSON line starts %s; want id, time, seq, event, call first", first)
				}
			}
		})
	}
}

func readAll(t *testing.T, s string, f audit.Format) []audit.Entry {
	t.Helper()
	r := audit.NewReader(strings.NewReader(s), f)
	var out []audit.Entry
	for {
		e, err := r.Read()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("Read: %v", err)
			}
			return out
		}
		out = append(out, e)
	}
}

func TestReaderRefusesWhatWriterDoesNotWrite(t *testing.T) {
	tests := []struct {
		format audit.Format
		in     string
	}{
		{audit.JSONL, `{"id":"1-0","seq":1}`},
		{audit.JSONL, `{"id":"1-0","by":"a","by":"b"}`},
		{audit.JSONL, `{"id":"1-0"} {}`},
		{audit.JSONL, `["id"]`},
		{audit.CSV, "id,seq\n1-0,1\n"},
		{audit.CSV, ""},
		{audit.CSV, "id,time,seq,event,thread,call,tool,decision,outcome,by,args_hash,reason,other,prev,hash\n1-0,,1,,,,,,,U1,,,\"{\"\"by\"\":\"\"U2\"\"}\",,\n"},
	}
	for _, tt := range tests {
		r := audit.NewReader(strings.NewReader(tt.in), tt.format)
		var err error
		for err == nil {
			_, err = r.Read()
		}
		if !errors.Is(err, audit.ErrMalformed) {
			t.Errorf("Read(%s %q) = %v; want ErrMalformed", tt.format, tt.in, err)
		}
	}
}
