// Package audit defines Countersign's audit trail as data: what an entry
// is, how entries are chained by hashes, how a chain is verified, and the
// line-oriented export formats (JSON lines and CSV) that log shippers
// read. It uses the standard library only and does no I/O of its own
// beyond the readers and writers it is given; where entries are kept
// (a Redis stream, see redisstore) and what they record (see runner) is
// decided elsewhere.
//
// # Entries and the chain
//
// An entry is a set of named string fields: what happened ("event":
// decision, refusal, note, execution, outcome), the thread, the call, the
// tool, who, when ("at"), the arguments' hash, and so on. Fields with an
// empty value are left out. Three fields chain the entries of the whole
// trail, across threads and replicas:
//
//	seq   the entry's position in the chain: 1, 2, 3, …
//	prev  the hash of the entry before it ("" for the first)
//	hash  the SHA-256 of the entry's canonical encoding, in lowercase hex
//
// The canonical encoding of an entry is the line "countersign-audit-v1"
// and then, for every field except "hash", in the byte order of the
// names, the name and the value each written as its length in bytes in
// decimal, a colon and the bytes themselves, followed by a newline:
//
//	countersign-audit-v1\n
//	2:at24:2026-11-24T08:00:00.123Z\n
//	5:event8:decision\n
//	…
//
// Lengths make the encoding unambiguous whatever the values hold, so a
// verifier needs nothing but SHA-256 to recompute a hash.
//
// # Packed entries
//
// A store may keep an entry's fields in one value instead of one stored
// field each: FieldPacked holds every field but seq and hash, in the
// lines of the canonical encoding (without its header line), and seq and
// hash stay fields of their own beside it. A store that appends entries
// one stored field each passes some thirty strings per entry; packed, it
// passes three. Readers take both forms (Unpack): the hash is the same
// either way, the SHA-256 of the canonical encoding of all the fields,
// so a chain may hold entries of both, and verifies as one.
//
// # Tampering
//
// Changing a field of an entry changes its hash; deleting, inserting or
// moving an entry breaks the prev links and the seq numbers of the
// entries after it. Whoever can write to the store can still rewrite the
// whole chain from some entry on, so keep a copy of the head's seq and
// hash (an Anchor), or of the exported entries, somewhere else: a chain
// that does not hold that entry was rewritten (Verifier.Anchors).
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The chain's fields.
const (
	FieldSeq  = "seq"
	FieldPrev = "prev"
	FieldHash = "hash"
)

// reserved reports whether a caller's fields may not use name: the
// chain's fields, the field that holds a packed entry's others, and the
// entry's ID and time as the export writes them.
// (A switch: it is asked of every field of every entry.)
func reserved(name string) bool {
	switch name {
	case "id", "time", FieldSeq, FieldPrev, FieldHash, FieldPacked:
		return true
	}
	return false
}

// ErrReservedField: fields to seal use a name the chain or the export
// owns.
var ErrReservedField = errors.New("reserved audit field name")

// Entry is one entry of the trail as it is kept.
type Entry struct {
	// ID is where the store keeps it: a Redis stream ID, "<unix ms>-<n>".
	// It orders entries but is not covered by the hash.
	ID string
	// Fields are all of the entry's fields, seq, prev and hash included
	// (an entry written before the chain existed has none of them).
	Fields map[string]string
}

// Seq is the entry's position in the chain, and whether it has a valid
// one.
func (e Entry) Seq() (int64, bool) {
	n, err := strconv.ParseInt(e.Fields[FieldSeq], 10, 64)
	return n, err == nil && n >= 1
}

// Chained reports whether the entry belongs to a chain: whether it has
// a seq. Entries written before the chain have none (their "hash", if
// any, was the arguments' hash).
func (e Entry) Chained() bool {
	_, ok := e.Fields[FieldSeq]
	return ok
}

// Time is when the store added the entry, from its ID (zero if the ID
// is not a stream ID).
func (e Entry) Time() time.Time {
	ms, _, _ := strings.Cut(e.ID, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// Head is the newest link of a chain as the store keeps it.
type Head struct {
	// Hash is the newest entry's hash; "" for an empty chain.
	Hash string
	// Seq is the newest entry's seq: how many entries were ever
	// appended.
	Seq int64
	// Trimmed is the seq of the newest entry removed by retention (0:
	// none was).
	Trimmed int64
}

// Seal returns fields as the entry that follows head: without empty
// values, with seq and prev set and hashed. It returns the chain's new
// head too. Fields may not use the names id, time, seq, prev, hash or
// fields (ErrReservedField).
func Seal(fields map[string]string, head Head) (map[string]string, Head, error) {
	sealed, next, err := SealFields(fields, head)
	if err != nil {
		return nil, head, err
	}
	out := make(map[string]string, len(sealed))
	for _, f := range sealed {
		out[f.Name] = f.Value
	}
	return out, next, nil
}

// Field is one field of an entry.
type Field struct {
	Name, Value string
}

// SealFields is Seal returning the entry's fields in the byte order of
// their names, the order of the canonical encoding: what a store that
// writes them one after another needs, without a map to build and sort
// again.
func SealFields(fields map[string]string, head Head) ([]Field, Head, error) {
	out := make([]Field, 0, len(fields)+3)
	for k, v := range fields {
		if reserved(k) {
			return nil, head, fmt.Errorf("%w: %q", ErrReservedField, k)
		}
		if v != "" {
			out = append(out, Field{k, v})
		}
	}
	out = append(out, Field{FieldSeq, strconv.FormatInt(head.Seq+1, 10)})
	if head.Hash != "" {
		out = append(out, Field{FieldPrev, head.Hash})
	}
	slices.SortFunc(out, func(a, b Field) int { return strings.Compare(a.Name, b.Name) })
	sum := sumSorted(out)
	i, _ := slices.BinarySearchFunc(out, FieldHash, func(f Field, name string) int { return strings.Compare(f.Name, name) })
	out = slices.Insert(out, i, Field{FieldHash, sum})
	return out, Head{Hash: sum, Seq: head.Seq + 1, Trimmed: head.Trimmed}, nil
}

// canonicalHeader starts every canonical encoding; a new encoding would
// get a new one.
const canonicalHeader = "countersign-audit-v1\n"

// Canonical is the canonical encoding of an entry's fields (see the
// package doc); the field "hash", if present, is left out.
func Canonical(fields map[string]string) []byte {
	sorted := make([]Field, 0, len(fields))
	for k, v := range fields {
		if k != FieldHash {
			sorted = append(sorted, Field{k, v})
		}
	}
	slices.SortFunc(sorted, func(a, b Field) int { return strings.Compare(a.Name, b.Name) })
	return appendCanonical(nil, sorted)
}

// appendCanonical appends the canonical encoding of fields, sorted by
// name and without "hash", to b.
func appendCanonical(b []byte, fields []Field) []byte {
	size := len(canonicalHeader)
	for _, f := range fields {
		size += digits(len(f.Name)) + len(f.Name) + digits(len(f.Value)) + len(f.Value) + 3
	}
	b = slices.Grow(b, size)
	b = append(b, canonicalHeader...)
	for _, f := range fields {
		b = strconv.AppendInt(b, int64(len(f.Name)), 10)
		b = append(b, ':')
		b = append(b, f.Name...)
		b = strconv.AppendInt(b, int64(len(f.Value)), 10)
		b = append(b, ':')
		b = append(b, f.Value...)
		b = append(b, '\n')
	}
	return b
}

// Sum is the hash of an entry's fields: the SHA-256 of their canonical
// encoding, in lowercase hex.
func Sum(fields map[string]string) string {
	return hexSum(Canonical(fields))
}

// sumSorted is Sum of fields sorted by name, without "hash".
func sumSorted(fields []Field) string {
	var buf [1024]byte // an entry's encoding mostly fits: no allocation of its own
	return hexSum(appendCanonical(buf[:0], fields))
}

// digits is the length of n ≥ 0 in decimal.
func digits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

func hexSum(canonical []byte) string {
	h := sha256.Sum256(canonical)
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], h[:])
	return string(out[:])
}
