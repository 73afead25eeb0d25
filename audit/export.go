package audit

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Format is an export format. Both write one entry per line, oldest
// first, with every field, so that the file can be verified again (bot
// audit verify --file) and a log shipper can read it line by line.
type Format string

// The export formats.
const (
	// JSONL: one JSON object per line, every value a string, in a
	// stable order: id, time, seq, event, thread, call, tool, the other
	// fields by name, then prev and hash. Fields an entry does not have
	// are left out.
	JSONL Format = "jsonl"
	// CSV: a header line, then one row per entry, on one line, with the
	// columns of csvColumns. "other" holds as a JSON object the fields
	// without a column of their own, and those whose value is empty or
	// holds a line break; an empty cell is a field the entry does not
	// have. The file is for spreadsheets too, so no cell can be taken
	// for a formula (see FormulaPrefixes): every cell is quoted, and a
	// cell whose value starts with a character that starts a formula,
	// or with a single quote, is written with a single quote before it,
	// which Reader takes off again.
	//
	// JSON lines are not neutralised that way: no program that reads
	// JSON takes a string for a formula. They hold text as the entries
	// do, with the control characters below U+0020 escaped as JSON
	// escapes them; print them with a tool that shows control
	// characters (bot audit does, for a terminal).
	CSV Format = "csv"
)

// FormulaPrefixes are the characters that make a spreadsheet take a cell
// for a formula when the cell starts with one (OWASP, CSV Injection):
// = + - @, tab and carriage return; and NUL, which some spreadsheets
// skip to the character after it.
const FormulaPrefixes = "=+-@\t\r\x00"

// csvQuote is the single quote that makes a spreadsheet take a cell as
// text.
const csvQuote = '\''

// neutralise returns a CSV cell's text for v: v itself, or v after a
// single quote when v starts with a formula prefix, or with a single
// quote (so that unneutralise can tell the two apart).
func neutralise(v string) string {
	if v != "" && (v[0] == csvQuote || strings.IndexByte(FormulaPrefixes, v[0]) >= 0) {
		return string(csvQuote) + v
	}
	return v
}

// unneutralise is the value of a CSV cell's text, and whether the text
// is one that neutralise writes.
func unneutralise(cell string) (string, bool) {
	if cell == "" || cell[0] != csvQuote {
		return cell, true
	}
	v := cell[1:]
	return v, v != "" && (v[0] == csvQuote || strings.IndexByte(FormulaPrefixes, v[0]) >= 0)
}

// ParseFormat reads a format's name.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case JSONL, CSV:
		return f, nil
	}
	return "", fmt.Errorf("format %q: want jsonl or csv", s)
}

// leading are the fields the JSON lines put first, after id and time;
// the chain's prev and hash come last.
var leading = []string{FieldSeq, "event", "thread", "call", "tool"}

// csvColumns are the CSV export's columns. id and time are the entry's;
// "other" holds the remaining fields.
var csvColumns = []string{"id", "time", FieldSeq, "event", "thread", "call", "tool", "decision", "outcome", "by", "args_hash", "reason", "other", FieldPrev, FieldHash}

// Writer writes entries in an export format. Call Flush at the end.
type Writer struct {
	format Format
	w      *bufio.Writer
	header bool
}

// NewWriter returns a Writer of format f to w.
func NewWriter(w io.Writer, f Format) *Writer {
	return &Writer{format: f, w: bufio.NewWriter(w)}
}

// Write writes one entry.
func (w *Writer) Write(e Entry) error {
	if w.format == CSV {
		return w.writeCSV(e)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	field := func(k, v string) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		appendJSONString(&b, k)
		b.WriteByte(':')
		appendJSONString(&b, v)
	}
	field("id", e.ID)
	if t := e.Time(); !t.IsZero() {
		field("time", t.UTC().Format(time.RFC3339Nano))
	}
	for _, k := range leading {
		if v, ok := e.Fields[k]; ok {
			field(k, v)
		}
	}
	for _, k := range sortedNames(e.Fields) {
		if !slices.Contains(leading, k) && k != FieldPrev && k != FieldHash && k != "id" && k != "time" {
			field(k, e.Fields[k])
		}
	}
	for _, k := range []string{FieldPrev, FieldHash} {
		if v, ok := e.Fields[k]; ok {
			field(k, v)
		}
	}
	b.WriteString("}\n")
	_, err := w.w.Write(b.Bytes())
	return err
}

func (w *Writer) writeCSV(e Entry) error {
	if !w.header {
		w.header = true
		if err := w.writeRow(csvColumns); err != nil {
			return err
		}
	}
	row := make([]string, len(csvColumns))
	other := map[string]string{}
	for k, v := range e.Fields {
		i := slices.Index(csvColumns, k)
		// A value that the CSV cell would not give back as it is (an
		// empty one, one with a carriage return, which CSV readers drop
		// before a newline) goes to "other", where JSON escapes it; so
		// does one with a newline, so that a row is one line (for log
		// shippers, and for importers that split rows at every line,
		// where a line of a cell could start with a formula).
		if i < 0 || k == "id" || k == "time" || k == "other" || v == "" || strings.ContainsAny(v, "\r\n") {
			other[k] = v
			continue
		}
		row[i] = v
	}
	row[0] = e.ID
	if t := e.Time(); !t.IsZero() {
		row[1] = t.UTC().Format(time.RFC3339Nano)
	}
	if len(other) > 0 {
		var b bytes.Buffer
		b.WriteByte('{')
		for i, k := range sortedNames(other) {
			if i > 0 {
				b.WriteByte(',')
			}
			appendJSONString(&b, k)
			b.WriteByte(':')
			appendJSONString(&b, other[k])
		}
		b.WriteByte('}')
		row[slices.Index(csvColumns, "other")] = b.String()
	}
	return w.writeRow(row)
}

// writeRow writes a CSV row of cells, each neutralised and quoted, as
// OWASP advises: quoted, a separator or a quote in a cell cannot start
// another cell, whichever separator the spreadsheet expects.
func (w *Writer) writeRow(cells []string) error {
	for i, v := range cells {
		if i > 0 {
			w.w.WriteByte(',')
		}
		w.w.WriteByte('"')
		w.w.WriteString(strings.ReplaceAll(neutralise(v), `"`, `""`))
		w.w.WriteByte('"')
	}
	return w.w.WriteByte('\n') // a bufio.Writer's error stays: this one is the first's
}

// Flush writes what is buffered (for CSV, at least the header).
func (w *Writer) Flush() error {
	if w.format == CSV && !w.header {
		w.header = true
		if err := w.writeRow(csvColumns); err != nil {
			return err
		}
	}
	return w.w.Flush()
}

// sortedNames are the names in fields, sorted.
func sortedNames(fields map[string]string) []string {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// appendJSONString writes s as a JSON string, without escaping HTML.
func appendJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}

// ErrMalformed: an export line or row is not what Writer writes.
var ErrMalformed = errors.New("malformed audit export")

// Reader reads entries written by Writer.
type Reader struct {
	format Format
	r      *bufio.Reader
	csv    *csv.Reader
	line   int
}

// NewReader returns a Reader of format f from r.
func NewReader(r io.Reader, f Format) *Reader {
	br := bufio.NewReader(r)
	out := &Reader{format: f, r: br}
	if f == CSV {
		out.csv = csv.NewReader(br)
		out.csv.FieldsPerRecord = len(csvColumns)
	}
	return out
}

// Read returns the next entry; io.EOF after the last. A line or row that
// is not what Writer writes is an error wrapping ErrMalformed.
func (r *Reader) Read() (Entry, error) {
	if r.format == CSV {
		return r.readCSV()
	}
	for {
		line, err := r.r.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return Entry{}, err
		}
		r.line++
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		fields, err := jsonObject(line)
		if err != nil {
			return Entry{}, fmt.Errorf("%w: line %d: %v", ErrMalformed, r.line, err)
		}
		e := Entry{ID: fields["id"], Fields: fields}
		delete(fields, "id")
		delete(fields, "time")
		return e, nil
	}
}

func (r *Reader) readCSV() (Entry, error) {
	for {
		row, err := r.csv.Read()
		if errors.Is(err, io.EOF) {
			if !r.header() {
				return Entry{}, fmt.Errorf("%w: no header", ErrMalformed)
			}
			return Entry{}, io.EOF
		}
		if err != nil {
			return Entry{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		r.line++
		for i, cell := range row {
			v, ok := unneutralise(cell)
			if !ok {
				return Entry{}, fmt.Errorf("%w: row %d: column %s starts with a single quote before neither a formula character nor another quote", ErrMalformed, r.line, csvColumns[i])
			}
			row[i] = v
		}
		if r.line == 1 {
			if !slices.Equal(row, csvColumns) {
				return Entry{}, fmt.Errorf("%w: the header is not %s", ErrMalformed, strings.Join(csvColumns, ","))
			}
			continue
		}
		e := Entry{ID: row[0], Fields: map[string]string{}}
		for i, v := range row {
			if k := csvColumns[i]; v != "" && k != "id" && k != "time" && k != "other" {
				e.Fields[k] = v
			}
		}
		if v := row[slices.Index(csvColumns, "other")]; v != "" {
			other, err := jsonObject([]byte(v))
			if err != nil {
				return Entry{}, fmt.Errorf("%w: row %d: other: %v", ErrMalformed, r.line, err)
			}
			for k, v := range other {
				if _, dup := e.Fields[k]; dup {
					return Entry{}, fmt.Errorf("%w: row %d: field %q is in its column and in other", ErrMalformed, r.line, k)
				}
				e.Fields[k] = v
			}
		}
		return e, nil
	}
}

func (r *Reader) header() bool { return r.line > 0 }

// jsonObject reads one JSON object whose values are all strings, and
// nothing after it; a repeated name is an error.
func jsonObject(b []byte) (map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	out := map[string]string{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("field %q twice", k)
		}
		t, err = dec.Token()
		if err != nil {
			return nil, err
		}
		v, ok := t.(string)
		if !ok {
			return nil, fmt.Errorf("field %q is not a string", k)
		}
		out[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the object")
	}
	return out, nil
}
