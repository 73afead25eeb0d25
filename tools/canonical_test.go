package tools_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/countersign/countersign/tools"
)

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"sorts keys and compacts", `{ "url": "https://a.example/x", "method": "GET" }`, `{"method":"GET","url":"https://a.example/x"}`},
		{"nested", `{"b":[1, {"z":true,"a":null}],"a":"x"}`, `{"a":"x","b":[1,{"a":null,"z":true}]}`},
		{"numbers as written", `{"n": 1e400, "m": 12345678901234567890}`, `{"m":12345678901234567890,"n":1e400}`},
		{"escapes read once", `{"k":"\u0041\n<>&"}`, `{"k":"A\n<>&"}`},
		{"escapes as encoding/json writes them", `{"k":"\b\f\u0001\u007f\/\u2028\u2029\"\\"}`, `{"k":"\b\f\u0001` + "\x7f" + `/\u2028\u2029\"\\"}`},
		{"not an object", `[1,2]`, `[1,2]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tools.Canonical(json.RawMessage(tt.in))
			if ref, _ := refCanonical(json.RawMessage(tt.in)); string(ref) != tt.want {
				t.Errorf("the reference Canonical(%s) = %s; want %s", tt.in, ref, tt.want)
			}
			if err != nil || string(got) != tt.want {
				t.Errorf("Canonical(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
			}
		})
	}
}

// TestCanonicalRefusesWhatReadersDisagreeOn is the attack the card must
// not fall for: arguments whose first key is shown and whose last key runs.
func TestCanonicalRefusesWhatReadersDisagreeOn(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", 3000)
	tests := []struct{ name, in string }{
		{"duplicate key", `{"method":"GET","url":"https://a.example/shown","pad":"` + pad + `","method":"DELETE","url":"https://a.example/hidden"}`},
		{"duplicate key through an escape", `{"method":"GET","\u006dethod":"DELETE"}`},
		{"duplicate key in a nested object", `{"headers":{"A":"1","A":"2"}}`},
		{"trailing value", `{"method":"GET"} {"method":"DELETE"}`},
		{"trailing garbage", `{"method":"GET"}x`},
		{"lone surrogate", `{"url":"https://a.example/\ud800"}`},
		{"invalid UTF-8", "{\"url\":\"\xff\"}"},
		{"empty", ``},
		{"cut short", `{"method":`},
		{"too deep", strings.Repeat("[", 40) + strings.Repeat("]", 40)},
		{"too long", `{"body":"` + strings.Repeat("y", tools.MaxArgsLen) + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tools.Canonical(json.RawMessage(tt.in))
			if !errors.Is(err, tools.ErrAmbiguousArgs) {
				t.Errorf("Canonical(%.60s) = %.60s, %v; want ErrAmbiguousArgs", tt.in, got, err)
			}
		})
	}
}

func TestArgsHashBindsToolAndArguments(t *testing.T) {
	t.Parallel()
	a := tools.ArgsHash("http_request", json.RawMessage(`{"method":"GET"}`))
	if b := tools.ArgsHash("http_request", json.RawMessage(`{"method":"GET"}`)); a != b {
		t.Errorf("ArgsHash is not stable: %s, %s", a, b)
	}
	for _, other := range []string{
		tools.ArgsHash("http_request", json.RawMessage(`{"method":"DELETE"}`)),
		tools.ArgsHash("http_reques", json.RawMessage(`t{"method":"GET"}`)),
	} {
		if other == a {
			t.Errorf("ArgsHash collides: %s", a)
		}
	}
	if len(a) != 64 || tools.ShortHash(a) != a[:12] {
		t.Errorf("ArgsHash = %q, ShortHash = %q; want 64 hex digits and their first 12", a, tools.ShortHash(a))
	}
}

// ArgsHash remembers recent hashes; someone who edits a call's arguments
// by a byte, or has many calls hashed at once so that they share its
// memory's slots, still gets each call's own hash: SHA-256 of the tool,
// a zero byte and the arguments, whatever was hashed before and
// whichever goroutine hashed it.
func TestArgsHashRemembersNoOtherCallsHash(t *testing.T) {
	t.Parallel()
	want := func(tool, args string) string {
		sum := sha256.Sum256([]byte(tool + "\x00" + args))
		return hex.EncodeToString(sum[:])
	}
	// Far more inputs than remembered hashes, so that slots are shared;
	// a long one (not remembered) among them.
	type input struct{ tool, args string }
	var inputs []input
	for i := range 2000 {
		inputs = append(inputs,
			input{"http_request", fmt.Sprintf(`{"method":"GET","url":"https://a.example/%d"}`, i)},
			input{"http_request", fmt.Sprintf(`{"method":"GET","url":"https://a.example/%d!"}`, i)},
			input{"http_reques", fmt.Sprintf(`t{"method":"GET","url":"https://a.example/%d"}`, i)})
	}
	inputs = append(inputs, input{"http_request", `{"body":"` + strings.Repeat("x", 600) + `"}`})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				for i := range inputs {
					in := inputs[(i*7+g*13+round)%len(inputs)]
					if got := tools.ArgsHash(in.tool, json.RawMessage(in.args)); got != want(in.tool, in.args) {
						select {
						case errs <- fmt.Sprintf("ArgsHash(%s, %s) = %s, want %s", in.tool, in.args, got, want(in.tool, in.args)):
						default:
						}
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// FuzzCanonical checks that what Canonical accepts, it accepts once and
// for all: the canonical form is canonical again, and encoding/json reads
// the input and the canonical form as the same value.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"method":"GET","url":"https://a.example/"}`,
		`{"a":{"b":[1,2,{"c":"\u00e9"}]},"d":-0.5e3}`,
		`{"m":"GET","\u006d":"DELETE"}`,
		`{"a":1}{"a":2}`, `"\ud83d\ude00"`, `[]`, `null`, `{"":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte("{\"k\":\"\\b\\f\\u0001\\u007f\u2028\u2029<>&\\\\\\\"\",\"j\":[{\"b\":1,\"a\":{\"d\":[],\"c\":{}}}]}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := tools.Canonical(in)
		// Stored approvals are bound to the hash of the canonical form:
		// it is what the first version wrote, byte for byte.
		want, werr := refCanonical(in)
		if (err == nil) != (werr == nil) || string(got) != string(want) || err != nil && errors.Is(err, tools.ErrAmbiguousArgs) != errors.Is(werr, tools.ErrAmbiguousArgs) {
			t.Fatalf("Canonical(%q) = %q, %v; the reference: %q, %v", in, got, err, want, werr)
		}
		if err != nil {
			return
		}
		again, err := tools.Canonical(got)
		if err != nil || string(again) != string(got) {
			t.Fatalf("Canonical(Canonical(%q)) = %q, %v; want %q", in, again, err, got)
		}
		var a, b any
		if err := json.Unmarshal(in, &a); err != nil {
			t.Fatalf("Canonical accepted %q, which encoding/json refuses: %v", in, err)
		}
		if err := json.Unmarshal(got, &b); err != nil {
			t.Fatalf("Canonical(%q) = %q, which encoding/json refuses: %v", in, got, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("Canonical(%q) = %q reads as %v, the input as %v", in, got, b, a)
		}
	})
}

// refCanonical is Canonical as first written, with a buffer per member
// and a json.Encoder per string: the reference FuzzCanonical holds the
// canonical form to.
func refCanonical(args json.RawMessage) (json.RawMessage, error) {
	if !utf8.Valid(args) {
		return nil, fmt.Errorf("%w: not valid UTF-8", tools.ErrAmbiguousArgs)
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var out bytes.Buffer
	if err := refValue(dec, &out, 0); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty or cut short", tools.ErrAmbiguousArgs)
		}
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the JSON value", tools.ErrAmbiguousArgs)
	}
	if out.Len() > tools.MaxArgsLen {
		return nil, fmt.Errorf("%w: %d bytes, more than the %d a person can be shown", tools.ErrAmbiguousArgs, out.Len(), tools.MaxArgsLen)
	}
	return out.Bytes(), nil
}

func refValue(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return refSyntaxErr(err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= 32 {
			return fmt.Errorf("%w: nested deeper than %d", tools.ErrAmbiguousArgs, 32)
		}
		if t == '[' {
			return refArray(dec, out, depth+1)
		}
		return refObject(dec, out, depth+1)
	case string:
		return refString(out, t)
	case json.Number:
		out.WriteString(t.String())
	case bool:
		if t {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case nil:
		out.WriteString("null")
	}
	return nil
}

func refArray(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	out.WriteByte('[')
	for i := 0; dec.More(); i++ {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := refValue(dec, out, depth); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // ']'
		return refSyntaxErr(err)
	}
	out.WriteByte(']')
	return nil
}

func refObject(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	type member struct {
		key   string
		value []byte
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return refSyntaxErr(err)
		}
		key := tok.(string) // the decoder only returns strings here
		if strings.ContainsRune(key, utf8.RuneError) {
			return fmt.Errorf("%w: key %q holds an invalid character", tools.ErrAmbiguousArgs, key)
		}
		if seen[key] {
			return fmt.Errorf("%w: key %q appears twice", tools.ErrAmbiguousArgs, key)
		}
		seen[key] = true
		var v bytes.Buffer
		if err := refValue(dec, &v, depth); err != nil {
			return err
		}
		members = append(members, member{key, v.Bytes()})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return refSyntaxErr(err)
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := refString(out, m.key); err != nil {
			return err
		}
		out.WriteByte(':')
		out.Write(m.value)
	}
	out.WriteByte('}')
	return nil
}

// writeString writes s as a JSON string. Go's decoder turns a lone
// surrogate escape (\ud800) into U+FFFD, which a reader in another
// language would not: such strings are refused, as are the replacement
// character's other sources.
func refString(out *bytes.Buffer, s string) error {
	if strings.ContainsRune(s, utf8.RuneError) {
		return fmt.Errorf("%w: a string holds an invalid character (U+FFFD or a lone surrogate)", tools.ErrAmbiguousArgs)
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	out.Truncate(out.Len() - 1) // Encode's newline
	return nil
}

func refSyntaxErr(err error) error {
	if errors.Is(err, io.EOF) {
		return err
	}
	return fmt.Errorf("%w: %v", tools.ErrAmbiguousArgs, strings.TrimPrefix(err.Error(), "json: "))
}

// A call read back from its checkpoint holds its arguments as
// json.Marshal writes them, with <, > and & escaped; they hash as the
// canonical form its card was made from does, and other arguments do not.
func TestArgsHashOfTheStoredForm(t *testing.T) {
	t.Parallel()
	canonical, err := tools.Canonical(json.RawMessage(`{"method":"GET","url":"https://api.example.com/items?a=1&b=<2>"}`))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := json.Marshal(canonical)
	if err != nil {
		t.Fatal(err)
	}
	if string(stored) == string(canonical) {
		t.Fatalf("json.Marshal(%s) escaped nothing; the test needs it to", canonical)
	}
	want := tools.ArgsHash("http_request", canonical)
	if got := tools.ArgsHash("http_request", stored); got != want {
		t.Errorf("ArgsHash(%s) = %s, want %s, the hash of %s", stored, got, want, canonical)
	}
	// A backslash before "u0026" is a character of the value, not an
	// escape of &.
	if literal := `{"a":"\\u0026"}`; tools.ArgsHash("t", json.RawMessage(literal)) == tools.ArgsHash("t", json.RawMessage(`{"a":"&"}`)) {
		t.Errorf("ArgsHash(%s) = ArgsHash({\"a\":\"&\"})", literal)
	}
}

// FuzzArgsHashStored: arguments hash the same in canonical form and as a
// checkpoint stores them, and two canonical forms that differ never hash
// the same.
func FuzzArgsHashStored(f *testing.F) {
	f.Add([]byte(`{"url":"https://x/?a=1&b=<2>"}`), []byte(`{"url":"https://x/?a=1\\u0026b=2"}`))
	f.Add([]byte(`{"a":"\\\\u0026"}`), []byte(`{"a":"&"}`))
	f.Add([]byte(`["\\u003c","<",">&"]`), []byte(`["\\\\u003c"]`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ca, err := tools.Canonical(a)
		if err != nil {
			return
		}
		stored, err := json.Marshal(json.RawMessage(ca))
		if err != nil {
			t.Fatalf("json.Marshal(%s): %v", ca, err)
		}
		if tools.ArgsHash("t", stored) != tools.ArgsHash("t", ca) {
			t.Errorf("ArgsHash(%s) differs from ArgsHash(%s), its canonical form", stored, ca)
		}
		cb, err := tools.Canonical(b)
		if err != nil {
			return
		}
		if string(ca) != string(cb) && tools.ArgsHash("t", ca) == tools.ArgsHash("t", cb) {
			t.Errorf("ArgsHash(%s) = ArgsHash(%s)", ca, cb)
		}
	})
}
