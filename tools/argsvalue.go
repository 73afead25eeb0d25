package tools

import (
	"encoding/json"

	"github.com/countersign/countersign/internal/jsonform"
)

// argsValue returns args, which json.Valid accepts, decoded as
// jsonschema.UnmarshalJSON decodes them for the schema's checks:
// objects as map[string]any, arrays as []any, numbers as json.Number
// (their text, so that large ones keep their precision), strings as
// json.Unmarshal decodes them. It reads them in one pass, without the
// decoder, its buffers and the token it reads after the value. ok is
// false for what it does not read (nesting deeper than maxArgsDepth,
// which Canonical refuses): the caller then asks UnmarshalJSON.
func argsValue(args []byte) (v any, ok bool) {
	d := argsDecoder{b: args}
	if v, ok = d.value(0); !ok {
		return nil, false
	}
	d.space()
	return v, d.i == len(d.b)
}

type argsDecoder struct {
	b []byte
	i int
}

func (d *argsDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next reads white space and returns the byte after it, 0 at the end.
func (d *argsDecoder) next() byte {
	d.space()
	if d.i == len(d.b) {
		return 0
	}
	return d.b[d.i]
}

// sep reads what follows an object's member or an array's element: a
// comma (more to come), the closing byte end (done, ok), or anything
// else (done, not ok).
func (d *argsDecoder) sep(end byte) (more, ok bool) {
	switch d.next() {
	case ',':
		d.i++
		return true, true
	case end:
		d.i++
		return false, true
	}
	return false, false
}

// done returns v when ok, else nothing.
func done(v any, ok bool) (any, bool) {
	if !ok {
		return nil, false
	}
	return v, true
}

func (d *argsDecoder) value(depth int) (any, bool) {
	if depth > maxArgsDepth {
		return nil, false
	}
	switch c := d.next(); {
	case c == '{':
		d.i++
		m := map[string]any{}
		if d.next() == '}' {
			d.i++
			return m, true
		}
		for {
			if d.next() != '"' {
				return nil, false
			}
			k, ok := d.str()
			if !ok || d.next() != ':' {
				return nil, false
			}
			d.i++
			v, ok := d.value(depth + 1)
			if !ok {
				return nil, false
			}
			m[k] = v // a key given twice: the last value, as encoding/json
			if more, ok := d.sep('}'); !more {
				return done(m, ok)
			}
		}
	case c == '[':
		d.i++
		a := make([]any, 0)
		if d.next() == ']' {
			d.i++
			return a, true
		}
		for {
			v, ok := d.value(depth + 1)
			if !ok {
				return nil, false
			}
			a = append(a, v)
			if more, ok := d.sep(']'); !more {
				return done(a, ok)
			}
		}
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.word("true")
	case c == 'f':
		return false, d.word("false")
	case c == 'n':
		return nil, d.word("null")
	case c == '-' || c >= '0' && c <= '9':
		start := d.i
		for d.i < len(d.b) {
			switch d.b[d.i] {
			case '-', '+', '.', 'e', 'E', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
				d.i++
				continue
			}
			break
		}
		// The text is a number: json.Valid said so of the whole.
		return json.Number(d.b[start:d.i]), true
	}
	return nil, false
}

// str reads a string as json.Unmarshal does.
func (d *argsDecoder) str() (string, bool) {
	r := jsonform.NewReader(d.b[d.i:])
	s, ok := r.StrOrUnmarshal()
	d.i += r.Offset()
	return s, ok
}

func (d *argsDecoder) word(w string) bool {
	if len(d.b)-d.i < len(w) || string(d.b[d.i:d.i+len(w)]) != w {
		return false
	}
	d.i += len(w)
	return true
}
