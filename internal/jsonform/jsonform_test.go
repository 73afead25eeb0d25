package jsonform_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/countersign/countersign/internal/jsonform"
)

var sampleStrings = []string{
	"", "call_7", "Re \"turn 7\": healthy\n", `GET /health -> 200 & <done>`, "\u2028\u2029", "tab\there",
	"\x00\x1f\x7f", "héllo, 世界 😀", "\xff\xfe", "a\xc3", `back\slash/`,
}

// FuzzString: AppendString writes what json.Marshal writes for a
// string, and the readers read a string as json.Unmarshal does: Str
// whenever it does not give up, StrOrUnmarshal always, both giving up
// where json.Unmarshal fails.
func FuzzString(f *testing.F) {
	for _, s := range sampleStrings {
		f.Add([]byte(s))
		q, _ := json.Marshal(s)
		f.Add(q)
	}
	f.Add([]byte(`"\ud83d\ude00"`))
	f.Add([]byte(`"\u00e9\/\b\f\r"`))
	f.Add([]byte(`"\ud800"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		// As a string to write.
		want, err := json.Marshal(string(b))
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonform.AppendString(nil, string(b)); string(got) != string(want) {
			t.Fatalf("AppendString(%q) = %s, want %s", b, got, want)
		}

		// As a string's JSON to read.
		var s string
		uerr := json.Unmarshal(b, &s)
		r := jsonform.NewReader(b)
		got, ok := r.StrOrUnmarshal()
		ok = ok && r.End()
		if ok != (uerr == nil) || ok && got != s {
			t.Fatalf("StrOrUnmarshal of %q = %q, %v; json.Unmarshal: %q, %v", b, got, ok, s, uerr)
		}
		r = jsonform.NewReader(b)
		if got, ok := r.Str(); ok && r.End() && (uerr != nil || got != s) {
			t.Fatalf("Str of %q = %q; json.Unmarshal: %q, %v", b, got, s, uerr)
		}
		// Name reads as StrOrUnmarshal does, the first time and when it
		// gives a string it read before.
		for range 2 {
			r = jsonform.NewReader(b)
			got, ok := r.Name()
			ok = ok && r.End()
			if ok != (uerr == nil) || ok && got != s {
				t.Fatalf("Name of %q = %q, %v; json.Unmarshal: %q, %v", b, got, ok, s, uerr)
			}
		}
	})
}

// A name read again is the string read before, not a new copy; a
// different one is its own text.
func TestNameIsNotCopiedAgain(t *testing.T) {
	read := func(b []byte) string {
		r := jsonform.NewReader(b)
		s, ok := r.Name()
		if !ok || !r.End() {
			t.Fatalf("Name of %s failed", b)
		}
		return s
	}
	first := read([]byte(`"C0123THREAD"`))
	again := read([]byte(`"C0123THREAD"`))
	if first != "C0123THREAD" || unsafe.StringData(first) != unsafe.StringData(again) {
		t.Fatalf("read again: %q at %p, first %q at %p: want the same string", again, unsafe.StringData(again), first, unsafe.StringData(first))
	}
	b := []byte(`"C0123THREAD"`)
	if n := testing.AllocsPerRun(100, func() { read(b) }); n != 0 {
		t.Errorf("reading a name read before allocates %v times, want 0", n)
	}
	if other := read([]byte(`"C0123THREAE"`)); other != "C0123THREAE" {
		t.Fatalf("another name read as %q", other)
	}
	long := `"` + strings.Repeat("x", 100) + `"`
	if a, b := read([]byte(long)), read([]byte(long)); a != long[1:101] || b != a {
		t.Fatalf("a long string read as %q", a)
	}
}

// What json.Marshal writes for a string is read by Str itself, not
// handed to encoding/json.
func TestStrReadsMarshalledStrings(t *testing.T) {
	for _, s := range sampleStrings {
		q, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		r := jsonform.NewReader(q)
		got, ok := r.Str()
		var want string
		if err := json.Unmarshal(q, &want); err != nil {
			t.Fatal(err)
		}
		if !ok || !r.End() || got != want {
			t.Errorf("Str of %s = %q, %v; want %q", q, got, ok, want)
		}
	}
	for _, q := range []string{`"\ud83d\ude00"`, "\"\xff\"", `"a`, "\"\n\"", `"\x"`, `x`} {
		r := jsonform.NewReader([]byte(q))
		if s, ok := r.Str(); ok {
			t.Errorf("Str read %q from %s; it is encoding/json's to read", s, q)
		}
	}
}

// Raw JSON is appended as json.Marshal appends a json.RawMessage.
func TestAppendRawIsMarshal(t *testing.T) {
	for _, raw := range []json.RawMessage{
		nil, {}, json.RawMessage(`{"a":1}`), json.RawMessage(`{ "a" : [1, 2] }`), json.RawMessage(`{"a":"<&>"}`),
		json.RawMessage("{\"a\":\"\u2028\"}"), json.RawMessage(`{"a":`), json.RawMessage(`"x"`),
	} {
		want, werr := json.Marshal(raw)
		got, err := jsonform.AppendRaw(nil, raw)
		if (err == nil) != (werr == nil) || string(got) != string(want) {
			t.Errorf("AppendRaw(%q) = %s, %v; json.Marshal: %s, %v", raw, got, err, want, werr)
		}
	}
}

// rawSamples are raw JSON texts, some of them as json.Marshal writes
// them, some not, some not JSON.
var rawSamples = []string{
	`{"a":1}`, `{ "a" : [1, 2] }`, `{"a":"<&>"}`, "{\"a\":\"\u2028\"}", `{"a":`, `"x"`, ``, ` `, `{}`, `[]`,
	`[[],{}]`, `{"a":{"b":[1,-2.5e+3,0.5,1E9,true,false,null]}}`, `{"a":"\u00e9\/\b\f\n\r\t\\\""}`,
	`{"a":"\u00g9"}`, `{"a":"\x"}`, `01`, `-`, `1.`, `1e`, `-0`, `.5`, `tru`, `nul`, `truex`, `[1,]`, `{"a":1,}`,
	`{"a"}`, `{1:2}`, `[1 2]`, `{"a":1}}`, `]`, "\"\x01\"", "\"h\xc3\xa9llo \xff\"", `"\ud800"`,
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
}

// FuzzAppendRaw: AppendRaw appends what json.Marshal writes for a
// json.RawMessage, and fails where it fails; what it appends without
// asking json.Marshal is what IsCompact and json.Valid both accept, and
// that is all they accept but values nested deeper than it follows.
func FuzzAppendRaw(f *testing.F) {
	for _, s := range rawSamples {
		f.Add([]byte(s))
	}
	for _, s := range sampleStrings {
		q, _ := json.Marshal(map[string]any{"s": s, "n": []any{1.5, -3, nil, true}})
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, werr := json.Marshal(json.RawMessage(raw))
		got, err := jsonform.AppendRaw([]byte("x"), raw)
		if (err == nil) != (werr == nil) || err == nil && string(got) != "x"+string(want) {
			t.Fatalf("AppendRaw(%q) = %q, %v; json.Marshal: %q, %v", raw, got, err, want, werr)
		}
		as := jsonform.IsCompact(raw) && json.Valid(raw)
		if m := jsonform.IsMarshalled(raw); m != as && (m || bytes.Count(raw, []byte("["))+bytes.Count(raw, []byte("{")) < 64) {
			t.Fatalf("isMarshalled(%q) = %v; IsCompact and json.Valid: %v", raw, m, as)
		}
	})
}

// What json.Marshal writes is appended as it is, without asking it
// again.
func TestMarshalledIsAppendedAsItIs(t *testing.T) {
	for _, s := range sampleStrings {
		v := map[string]any{"s": s, "list": []any{s, 1.5, -3, 1e21, nil, true, false, map[string]any{}, []any{}}}
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !jsonform.IsMarshalled(raw) {
			t.Errorf("%s, as json.Marshal wrote it, is not taken as it is", raw)
		}
	}
}

// FuzzInt64: Int64 reads an integer as json.Unmarshal reads it into an
// int64 whenever it does not give up, and gives up on none of the
// integers strconv writes.
func FuzzInt64(f *testing.F) {
	for _, s := range []string{"0", "-0", "1764150837503626813", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "-9223372036854775809", "99999999999999999999", "01", "1.5", "1e3", "-", "", "null"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want int64
		uerr := json.Unmarshal(b, &want)
		r := jsonform.NewReader(b)
		if got, ok := r.Int64(); ok && r.End() && (uerr != nil || got != want) {
			t.Fatalf("Int64 of %q = %d; json.Unmarshal: %d, %v", b, got, want, uerr)
		}
		if uerr == nil && string(b) == strconv.FormatInt(want, 10) {
			r := jsonform.NewReader(b)
			if got, ok := r.Int64(); !ok || !r.End() || got != want {
				t.Fatalf("Int64 of %q = %d, %v; want %d", b, got, ok, want)
			}
		}
	})
}

// Null reads null and nothing else.
func TestNull(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{{"null", true}, {" null", true}, {"nul", false}, {`"null"`, false}, {"", false}, {"true", false}}
	for _, tt := range tests {
		r := jsonform.NewReader([]byte(tt.in))
		if got := r.Null() && r.End(); got != tt.want {
			t.Errorf("Null of %q = %v, want %v", tt.in, got, tt.want)
		}
	}
}
