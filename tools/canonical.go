package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxArgsLen is the longest arguments a call may have, in bytes of their
// canonical JSON: what a person approves must fit on the screen that
// shows all of it (the card's "Show all" view holds about 260,000
// characters, and escaping for Slack can make a byte five characters).
const MaxArgsLen = 50_000

// maxArgsDepth bounds the nesting of arguments.
const maxArgsDepth = 32

// ErrAmbiguousArgs is the class of arguments that two JSON readers could
// read differently — a duplicate key, data after the value, invalid
// UTF-8 — and that are therefore never shown to a person for approval.
var ErrAmbiguousArgs = errors.New("ambiguous arguments")

// Canonical decodes args strictly and returns them in canonical form:
// compact, object keys sorted, strings re-encoded, numbers as written.
// It refuses (with an error wrapping ErrAmbiguousArgs) anything a tool
// could read differently from what a card shows: duplicate object keys,
// also when spelled with \u escapes; data after the value; invalid UTF-8
// or lone surrogates in strings; nesting deeper than 32; more than
// MaxArgsLen bytes. A person approves the canonical form, and the tool
// runs with exactly those bytes.
func Canonical(args json.RawMessage) (json.RawMessage, error) {
	if out, ok := canonicalFast(args); ok {
		return out, nil
	}
	return canonicalSlow(args)
}

// canonicalSlow is Canonical through encoding/json's decoder, token by
// token: for any arguments, and the one that says why it refuses them.
func canonicalSlow(args json.RawMessage) (json.RawMessage, error) {
	if !utf8.Valid(args) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrAmbiguousArgs)
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var out bytes.Buffer
	if err := canonicalValue(dec, &out, 0); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty or cut short", ErrAmbiguousArgs)
		}
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the JSON value", ErrAmbiguousArgs)
	}
	if out.Len() > MaxArgsLen {
		return nil, fmt.Errorf("%w: %d bytes, more than the %d a person can be shown", ErrAmbiguousArgs, out.Len(), MaxArgsLen)
	}
	return out.Bytes(), nil
}

func canonicalValue(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return syntaxErr(err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxArgsDepth {
			return fmt.Errorf("%w: nested deeper than %d", ErrAmbiguousArgs, maxArgsDepth)
		}
		if t == '[' {
			return canonicalArray(dec, out, depth+1)
		}
		return canonicalObject(dec, out, depth+1)
	case string:
		return writeString(out, t)
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

func canonicalArray(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	out.WriteByte('[')
	for i := 0; dec.More(); i++ {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := canonicalValue(dec, out, depth); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // ']'
		return syntaxErr(err)
	}
	out.WriteByte(']')
	return nil
}

func canonicalObject(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	// The members' values are written one after another to values, and
	// written out from there in the order of their keys: one buffer for
	// the object, not one per member.
	type member struct {
		key        string
		start, end int
	}
	var members []member
	var values bytes.Buffer
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return syntaxErr(err)
		}
		key := tok.(string) // the decoder only returns strings here
		if strings.ContainsRune(key, utf8.RuneError) {
			return fmt.Errorf("%w: key %q holds an invalid character", ErrAmbiguousArgs, key)
		}
		if seen[key] {
			return fmt.Errorf("%w: key %q appears twice", ErrAmbiguousArgs, key)
		}
		seen[key] = true
		start := values.Len()
		if err := canonicalValue(dec, &values, depth); err != nil {
			return err
		}
		members = append(members, member{key, start, values.Len()})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return syntaxErr(err)
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := writeString(out, m.key); err != nil {
			return err
		}
		out.WriteByte(':')
		out.Write(values.Bytes()[m.start:m.end])
	}
	out.WriteByte('}')
	return nil
}

// writeString writes s as a JSON string, as a json.Encoder that does not
// escape HTML writes it. Go's decoder turns a lone surrogate escape
// (\ud800) into U+FFFD, which a reader in another language would not:
// such strings are refused, as are the replacement character's other
// sources.
func writeString(out *bytes.Buffer, s string) error {
	if strings.ContainsRune(s, utf8.RuneError) {
		return fmt.Errorf("%w: a string holds an invalid character (U+FFFD or a lone surrogate)", ErrAmbiguousArgs)
	}
	const hex = "0123456789abcdef"
	out.WriteByte('"')
	start := 0
	for i, r := range s { // valid UTF-8: checked above
		var esc string
		switch {
		case r == '"':
			esc = `\"`
		case r == '\\':
			esc = `\\`
		case r == '\b':
			esc = `\b`
		case r == '\f':
			esc = `\f`
		case r == '\n':
			esc = `\n`
		case r == '\r':
			esc = `\r`
		case r == '\t':
			esc = `\t`
		case r < 0x20:
			esc = string([]byte{'\\', 'u', '0', '0', hex[r>>4], hex[r&0xF]})
		case r == '\u2028':
			esc = `\u2028`
		case r == '\u2029':
			esc = `\u2029`
		default:
			continue
		}
		out.WriteString(s[start:i])
		out.WriteString(esc)
		start = i + utf8.RuneLen(r)
	}
	out.WriteString(s[start:])
	out.WriteByte('"')
	return nil
}

func syntaxErr(err error) error {
	if errors.Is(err, io.EOF) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrAmbiguousArgs, strings.TrimPrefix(err.Error(), "json: "))
}

// ArgsHash is the hash an approval is bound to: SHA-256 over the tool's
// name and its canonical arguments, in hex. A decision claims it, and a
// call runs only if the hash of what it is about to run equals it.
//
// The arguments may also be as a checkpoint stores them: json.Marshal
// writes <, > and & as \u003c, \u003e and \u0026, which the canonical
// form never does, so a call read back from its checkpoint holds
// "?a=1\u0026b=2" where its card was made from "?a=1&b=2". Those escapes
// are read as their characters: the hash is the canonical form's, before
// a save and after.
func ArgsHash(tool string, canonical json.RawMessage) string {
	canonical = UnescapeHTML(canonical)
	// It is computed several times a step, for each call a checkpoint
	// holds (a turn-1 approval cycle: 13 times, for one call): what is
	// hashed goes through a buffer on the stack when it fits, and the
	// hash of such an input is remembered (recentHashes), so that the
	// same call's hash is one SHA-256 and one allocation, not 13.
	var buf [maxRememberedInput]byte
	in, short := key(&buf, tool, canonical)
	if !short {
		return hexSHA256(in)
	}
	if hash, ok := recentHashes.get(in); ok {
		return hash
	}
	hash := hexSHA256(in)
	recentHashes.put(in, hash)
	return hash
}

// recentHashes are the hashes ArgsHash computed last.
var recentHashes = newRecent[string](256)

func hexSHA256(b []byte) string {
	sum := sha256.Sum256(b)
	var digits [2 * sha256.Size]byte
	hex.Encode(digits[:], sum[:])
	return string(digits[:])
}

// UnescapeHTML undoes json.Marshal's escaping of <, > and & in the JSON
// b (\u003c, \u003e, \u0026), leaving every other escape as it is. b is
// returned as it is when it holds none. Arguments read back from a
// checkpoint go through it, so that a card, a form or a result shows
// them as the call made them ("?a=1&b=2", not "?a=1\u0026b=2").
func UnescapeHTML(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u00`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 == len(b) {
			out = append(out, b[i])
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			var c byte
			switch string(b[i+2 : i+6]) {
			case "003c", "003C":
				c = '<'
			case "003e", "003E":
				c = '>'
			case "0026":
				c = '&'
			}
			if c != 0 {
				out = append(out, c)
				i += 5
				continue
			}
		}
		// Another escape, \\ included: both bytes as they are.
		out = append(out, b[i], b[i+1])
		i++
	}
	return out
}

// ShortHash is the form of a hash a card shows: its first 12 hex digits.
func ShortHash(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}
