package audit

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// FieldPacked is the stored field that holds a packed entry's fields.
const FieldPacked = "fields"

// ErrPacked: a packed entry's fields are not in the packed form, or name
// a field twice.
var ErrPacked = errors.New("malformed packed audit entry")

// Packed is an entry sealed for a store that keeps it packed: its seq,
// its hash and its other fields packed (the value of FieldPacked).
type Packed struct {
	Seq    int64
	Hash   string
	Fields string
}

// SealPacked is Seal for a store that keeps entries packed: fields as the
// entry that follows head, packed, and the chain's new head. Its hash is
// the one Seal gives the same fields.
func SealPacked(fields map[string]string, head Head) (Packed, Head, error) {
	var stack [16]Field
	sorted := stack[:0]
	for k, v := range fields {
		if reserved(k) {
			return Packed{}, head, fmt.Errorf("%w: %q", ErrReservedField, k)
		}
		if v != "" {
			sorted = append(sorted, Field{k, v})
		}
	}
	seq := head.Seq + 1
	var digits [20]byte
	seqText := strconv.AppendInt(digits[:0], seq, 10)
	if head.Hash != "" {
		sorted = append(sorted, Field{FieldPrev, head.Hash})
	}
	slices.SortFunc(sorted, func(a, b Field) int { return strings.Compare(a.Name, b.Name) })
	// The canonical encoding is the header, the lines of the fields
	// before seq, seq's line, and the lines of those after it; packed,
	// the same lines without the header and seq's.
	at, _ := slices.BinarySearchFunc(sorted, FieldSeq, func(f Field, name string) int { return strings.Compare(f.Name, name) })
	var buf [1024]byte // an entry's encoding mostly fits: no allocation of its own
	b := append(buf[:0], canonicalHeader...)
	b = appendLines(b, sorted[:at])
	seqFrom := len(b)
	b = appendLine(b, FieldSeq, string(seqText))
	seqTo := len(b)
	b = appendLines(b, sorted[at:])
	var packed strings.Builder
	packed.Grow(len(b) - len(canonicalHeader) - (seqTo - seqFrom))
	packed.Write(b[len(canonicalHeader):seqFrom])
	packed.Write(b[seqTo:])
	sum := hexSum(b)
	return Packed{Seq: seq, Hash: sum, Fields: packed.String()}, Head{Hash: sum, Seq: seq, Trimmed: head.Trimmed}, nil
}

func appendLines(b []byte, fields []Field) []byte {
	for _, f := range fields {
		b = appendLine(b, f.Name, f.Value)
	}
	return b
}

func appendLine(b []byte, name, value string) []byte {
	b = strconv.AppendInt(b, int64(len(name)), 10)
	b = append(b, ':')
	b = append(b, name...)
	b = strconv.AppendInt(b, int64(len(value)), 10)
	b = append(b, ':')
	b = append(b, value...)
	return append(b, '\n')
}

// Unpack returns an entry's fields as a store kept them: stored itself
// when it has no FieldPacked (an entry kept one field each, as earlier
// versions kept all), else the fields FieldPacked holds with the others
// stored beside it (seq, hash). A packed value that is not in the packed
// form, or that names a field stored beside it, is ErrPacked, with
// stored itself: a verifier then finds the entry's content does not
// match its hash.
func Unpack(stored map[string]string) (map[string]string, error) {
	packed, ok := stored[FieldPacked]
	if !ok {
		return stored, nil
	}
	out := make(map[string]string, len(stored)+16)
	for k, v := range stored {
		if k != FieldPacked {
			out[k] = v
		}
	}
	rest := packed
	for rest != "" {
		var name, value string
		var err error
		if name, rest, err = cutPacked(rest); err == nil {
			value, rest, err = cutPacked(rest)
		}
		if err == nil && (rest == "" || rest[0] != '\n') {
			err = errors.New("a field's line does not end after its value")
		}
		if err == nil {
			if _, dup := out[name]; dup || name == FieldPacked {
				err = fmt.Errorf("field %q is there twice", name)
			}
		}
		if err != nil {
			return stored, fmt.Errorf("%w: %v", ErrPacked, err)
		}
		out[name] = value
		rest = rest[1:]
	}
	return out, nil
}

// cutPacked reads a length, a colon and that many bytes from the start of
// s, and returns them and what follows.
func cutPacked(s string) (string, string, error) {
	colon := strings.IndexByte(s, ':')
	if colon < 1 || colon > 10 {
		return "", "", errors.New("a length is missing")
	}
	n, err := strconv.Atoi(s[:colon])
	if err != nil || n < 0 || s[0] == '0' && colon > 1 || s[0] == '+' || s[0] == '-' {
		return "", "", fmt.Errorf("%q is not a length", s[:colon])
	}
	s = s[colon+1:]
	if n > len(s) {
		return "", "", fmt.Errorf("a length of %d runs past the end", n)
	}
	return s[:n], s[n:], nil
}
