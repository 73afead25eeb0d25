package audit_test

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"testing"

	"github.com/countersign/countersign/audit"
)

// stored is an entry as a store that keeps it packed stores it.
func stored(p audit.Packed) map[string]string {
	return map[string]string{"seq": strconv.FormatInt(p.Seq, 10), "hash": p.Hash, audit.FieldPacked: p.Fields}
}

// An entry sealed packed reads back, unpacked, as the same entry sealed
// field by field: the same fields, the same hash, the same next head.
func TestSealPackedIsSeal(t *testing.T) {
	t.Parallel()
	for _, head := range []audit.Head{{}, {Hash: "ab12", Seq: 41, Trimmed: 7}} {
		fields := map[string]string{
			"event": "execution", "thread": "T1:C1:1.2", "call": "0.0", "tool": "http_request",
			"args": `{"url":"https://example.com/a:b","note":"3:seq\n"}`, "by": "U1", "at": "2026-11-24T08:00:00.123Z",
			"reason": "", "zz": "last", "a": "",
		}
		want, wantNext, err := audit.Seal(fields, head)
		if err != nil {
			t.Fatal(err)
		}
		p, next, err := audit.SealPacked(fields, head)
		if err != nil {
			t.Fatal(err)
		}
		if next != wantNext || p.Hash != want["hash"] || strconv.FormatInt(p.Seq, 10) != want["seq"] {
			t.Fatalf("SealPacked = %+v, %+v; Seal = %v, %+v", p, next, want, wantNext)
		}
		got, err := audit.Unpack(stored(p))
		if err != nil || !maps.Equal(got, want) {
			t.Fatalf("Unpack(%q) = %v, %v; want %v", p.Fields, got, err, want)
		}
	}
	if _, _, err := audit.SealPacked(map[string]string{"fields": "x"}, audit.Head{}); !errors.Is(err, audit.ErrReservedField) {
		t.Errorf("SealPacked with field %q = %v, want ErrReservedField", "fields", err)
	}
}

// A chain whose older entries were stored field by field and whose newer
// ones are packed verifies as one; a packed entry changed, or its packed
// value broken, is found changed.
func TestVerifyReadsBothForms(t *testing.T) {
	t.Parallel()
	var entries []audit.Entry
	var head audit.Head
	for i := range 6 {
		fields := map[string]string{"event": "decision", "decision": "approve", "by": "U1", "call": fmt.Sprintf("0.%d", i)}
		var e map[string]string
		if i < 3 || i == 4 {
			sealed, next, err := audit.Seal(fields, head)
			if err != nil {
				t.Fatal(err)
			}
			e, head = sealed, next
		} else {
			p, next, err := audit.SealPacked(fields, head)
			if err != nil {
				t.Fatal(err)
			}
			e, head = stored(p), next
		}
		entries = append(entries, audit.Entry{ID: fmt.Sprintf("1700000001000-%d", i), Fields: e})
	}
	read := func(entries []audit.Entry) []audit.Entry {
		out := make([]audit.Entry, len(entries))
		for i, e := range entries {
			fields, _ := audit.Unpack(e.Fields)
			out[i] = audit.Entry{ID: e.ID, Fields: fields}
		}
		return out
	}
	rep, err := verify(read(entries), &head)
	if err != nil || rep.Entries != 6 || rep.Last != head {
		t.Fatalf("verify = %+v, %v; want 6 entries up to %+v", rep, err, head)
	}
	for name, change := range map[string]func(map[string]string){
		"a packed field changed":    func(f map[string]string) { f["fields"] = f["fields"][:len(f["fields"])-5] + "U2\n" },
		"the packed value broken":   func(f map[string]string) { f["fields"] += "9:x" },
		"a field packed and beside": func(f map[string]string) { f["event"] = "decision" },
		"the seq beside changed":    func(f map[string]string) { f["seq"] = "5" },
	} {
		changed := make([]audit.Entry, len(entries))
		copy(changed, entries)
		changed[3].Fields = maps.Clone(entries[3].Fields)
		change(changed[3].Fields)
		_, err := verify(read(changed), &head)
		var b *audit.BreakError
		if !errors.As(err, &b) || b.ID != entries[3].ID || b.Kind == 0 {
			t.Errorf("%s: verify = %v; want a break at %s", name, err, entries[3].ID)
		}
	}
}

// Unpack does not panic on any packed value; what it cannot read it
// returns as stored, with ErrPacked; what it reads, packed again by
// SealPacked after the same head, has the same hash as Seal gives it.
func FuzzUnpack(f *testing.F) {
	p, _, _ := audit.SealPacked(map[string]string{"event": "decision", "by": "U1"}, audit.Head{Hash: "ab", Seq: 1})
	f.Add(p.Fields)
	f.Add("")
	f.Add("5:event8:decision\n")
	f.Add("5:event8:decision")
	f.Add("05:event8:decision\n")
	f.Add("5:event99:x\n")
	f.Add("1:a1:b\n1:a1:c\n")
	f.Add("4:hash1:x\n")
	f.Add("-1:a1:b\n")
	f.Fuzz(func(t *testing.T, packed string) {
		in := map[string]string{"seq": "2", "hash": "h", audit.FieldPacked: packed}
		got, err := audit.Unpack(in)
		if err != nil {
			if !errors.Is(err, audit.ErrPacked) || !maps.Equal(got, in) {
				t.Fatalf("Unpack(%q) = %v, %v; want what was stored, and ErrPacked", packed, got, err)
			}
			return
		}
		if got["seq"] != "2" || got["hash"] != "h" {
			t.Fatalf("Unpack(%q) = %v: seq or hash is not the one stored beside", packed, got)
		}
		if _, ok := got[audit.FieldPacked]; ok && packed != "" {
			t.Fatalf("Unpack(%q) = %v: holds the packed value", packed, got)
		}
		fields := maps.Clone(got)
		prev := fields["prev"]
		for _, k := range []string{"seq", "hash", "prev", "id", "time"} {
			delete(fields, k)
		}
		maps.DeleteFunc(fields, func(_, v string) bool { return v == "" })
		head := audit.Head{Hash: prev, Seq: 1}
		sealed, _, err := audit.Seal(fields, head)
		if err != nil {
			return // a reserved name among the packed fields: Seal never packs one
		}
		again, _, err := audit.SealPacked(fields, head)
		if err != nil || again.Hash != sealed["hash"] {
			t.Fatalf("fields %v: SealPacked = %+v, %v; Seal's hash %s", fields, again, err, sealed["hash"])
		}
		back, err := audit.Unpack(stored(again))
		if err != nil || !maps.Equal(back, sealed) {
			t.Fatalf("fields %v packed as %q unpack to %v, %v; want %v", fields, again.Fields, back, err, sealed)
		}
	})
}
