package audit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// BreakKind says how a chain is broken.
type BreakKind int

// The ways a chain breaks.
const (
	// Changed: an entry's content does not match its hash, or it does
	// not link to the entry before it although it follows it: it was
	// edited or replaced.
	Changed BreakKind = iota + 1
	// Missing: entries are gone from the middle of the chain, from its
	// end, or from its start beyond what retention removed.
	Missing
	// Reordered: an entry comes after one it should precede, or is
	// there twice.
	Reordered
	// Inserted: an entry without the chain's fields amid the chain.
	Inserted
)

var breakNames = map[BreakKind]string{Changed: "changed", Missing: "missing", Reordered: "reordered", Inserted: "inserted"}

func (k BreakKind) String() string {
	if s, ok := breakNames[k]; ok {
		return s
	}
	return fmt.Sprintf("BreakKind(%d)", int(k))
}

// BreakError is the first break found in a chain.
type BreakError struct {
	// ID and Seq name the entry where the chain breaks (Seq 0 when it
	// has none, ID "" when no entry is kept).
	ID   string
	Seq  int64
	Kind BreakKind
	// Detail says what is wrong, for people.
	Detail string
}

func (e *BreakError) Error() string {
	switch {
	case e.ID == "":
		return fmt.Sprintf("%s: %s", e.Kind, e.Detail)
	case e.Seq == 0:
		return fmt.Sprintf("entry %s: %s: %s", e.ID, e.Kind, e.Detail)
	}
	return fmt.Sprintf("entry %s (seq %d): %s: %s", e.ID, e.Seq, e.Kind, e.Detail)
}

// Report is what a verification found.
type Report struct {
	// Entries is how many entries of the chain were verified.
	Entries int
	// Before is how many entries without the chain's fields come before
	// the chain's first: written before the bot chained its entries.
	// They are not covered by any hash.
	Before int
	// First is the seq of the oldest entry verified (0: none); the
	// entries before it were removed by retention, or were not in the
	// input.
	First int64
	// Last is the newest entry verified: its hash and seq.
	Last Head
	// Trimmed is, when a head was given, the seq of the newest entry
	// that retention removed (0: none).
	Trimmed int64
}

// Anchor is an entry of the chain noted somewhere else, by its seq and
// hash, written SEQ:HASH (bot audit head prints the head's). A chain that
// verifies on its own may still have been rewritten from some entry on,
// every hash after it recomputed, by whoever can write to the store; it
// then no longer holds an anchor noted before, at or after that entry.
type Anchor struct {
	Seq  int64
	Hash string
}

// String is the anchor as ParseAnchor reads it: SEQ:HASH.
func (a Anchor) String() string { return strconv.FormatInt(a.Seq, 10) + ":" + a.Hash }

// Anchor is the head as an anchor, and false for an empty chain.
func (h Head) Anchor() (Anchor, bool) {
	return Anchor{Seq: h.Seq, Hash: h.Hash}, h.Seq > 0 && h.Hash != ""
}

// ErrBadAnchor: the text is not an anchor.
var ErrBadAnchor = errors.New("not an audit anchor")

// ParseAnchor reads an anchor written SEQ:HASH, the hash in full (64 hex
// digits).
func ParseAnchor(s string) (Anchor, error) {
	seq, hash, ok := strings.Cut(strings.TrimSpace(s), ":")
	n, err := strconv.ParseInt(seq, 10, 64)
	hash = strings.ToLower(hash)
	if !ok || err != nil || n < 1 || len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return Anchor{}, fmt.Errorf("%w: %q: want SEQ:HASH, a seq and a hash in full as bot audit head prints them", ErrBadAnchor, s)
	}
	return Anchor{Seq: n, Hash: hash}, nil
}

// AnchorError: a chain that verified does not hold an anchor.
type AnchorError struct {
	Anchor Anchor
	// ID and Hash are the chain's entry with the anchor's seq, when it
	// has one (its hash is another).
	ID, Hash string
	// Detail says why, for people.
	Detail string
}

func (e *AnchorError) Error() string {
	return fmt.Sprintf("the trail does not hold the anchor %s: %s", e.Anchor, e.Detail)
}

// Verifier checks a chain entry by entry, oldest first, without keeping
// the entries: set Anchors, Add each entry, then Finish. The oldest
// entry's prev is taken as the chain's anchor. A Verifier is for one
// goroutine.
type Verifier struct {
	// Anchors are entries the chain must hold, by seq and hash, checked
	// by Finish.
	Anchors []Anchor
	// found are the entries verified at the anchors' seqs, in their
	// order: the entries' IDs and hashes.
	found []struct{ id, hash string }

	report  Report
	firstID string
	lastID  string
	started bool
	broken  error
	// held is a gap in the seq numbers, reported with the next entry:
	// as moved entries if that one fills it, else as missing ones.
	held *BreakError
}

// Add checks the next entry. It returns a *BreakError at the first break
// (a gap in the chain, at the entry after it: moved entries fill it), and
// the same error for every entry after it.
func (v *Verifier) Add(e Entry) error {
	if v.broken != nil {
		return v.broken
	}
	if h := v.held; h != nil {
		if seq, ok := e.Seq(); ok && seq < h.Seq {
			return v.fail(h.ID, h.Seq, Reordered, fmt.Sprintf("it comes before entry %d (%s): entries were moved", seq, e.ID))
		}
		v.broken = h
		return h
	}
	if !e.Chained() {
		if !v.started {
			v.report.Before++
			return nil
		}
		return v.fail(e.ID, 0, Inserted, "it has no seq: it was added outside the chain "+
			"(by hand, or by a version of the bot that did not chain its entries)")
	}
	seq, ok := e.Seq()
	if !ok {
		return v.fail(e.ID, 0, Changed, fmt.Sprintf("its seq %q is not a positive number", e.Fields[FieldSeq]))
	}
	if e.Fields[FieldHash] != Sum(e.Fields) {
		return v.fail(e.ID, seq, Changed, "its content does not match its hash: a field was changed, added or removed")
	}
	prev, last := e.Fields[FieldPrev], v.report.Last
	switch {
	case !v.started && seq == 1 && prev != "":
		return v.fail(e.ID, seq, Changed, "the chain's first entry names a predecessor")
	case !v.started:
		v.started, v.report.First, v.firstID = true, seq, e.ID
	case seq > last.Seq+1:
		v.held = &BreakError{ID: e.ID, Seq: seq, Kind: Missing, Detail: missing(last.Seq+1, seq-1) + " before it, after " + v.lastID}
		return nil
	case seq == 1 && prev == "":
		return v.fail(e.ID, seq, Reordered, fmt.Sprintf("the chain starts over here after entry %d: "+
			"the chain's head was deleted from the store", last.Seq))
	case seq <= last.Seq:
		return v.fail(e.ID, seq, Reordered, fmt.Sprintf("it comes after entry %d (%s): entries were moved or repeated", last.Seq, v.lastID))
	case prev != last.Hash:
		return v.fail(e.ID, seq, Changed, fmt.Sprintf("its prev is not the hash of entry %d (%s) before it: one of the two was replaced", last.Seq, v.lastID))
	}
	for i, a := range v.Anchors {
		if a.Seq == seq {
			if v.found == nil {
				v.found = make([]struct{ id, hash string }, len(v.Anchors))
			}
			v.found[i].id, v.found[i].hash = e.ID, e.Fields[FieldHash]
		}
	}
	v.report.Entries++
	v.report.Last = Head{Hash: e.Fields[FieldHash], Seq: seq}
	v.lastID = e.ID
	return nil
}

// Finish ends the verification and returns what it found. Given the
// store's head, it also checks that the chain reaches it and that no
// entry is missing before the oldest beyond those retention removed;
// without one (an exported file) the oldest entry's prev and the newest
// entry are taken as they are. Then it checks that the chain holds each
// of the Anchors (an *AnchorError if not): an anchor older than the
// oldest entry verified, or newer than the newest, is not held either.
func (v *Verifier) Finish(head *Head) (Report, error) {
	if v.held != nil && v.broken == nil {
		v.broken = v.held
	}
	if v.broken != nil {
		return v.report, v.broken
	}
	if head == nil {
		return v.report, v.anchored(0)
	}
	v.report.Trimmed = head.Trimmed
	last := v.report.Last
	switch {
	case !v.started && head.Seq > head.Trimmed:
		return v.report, v.fail("", 0, Missing, fmt.Sprintf("the store's head is entry %d but no entry of the chain is kept; "+
			"retention removed entries up to %d only", head.Seq, head.Trimmed))
	case !v.started:
		return v.report, v.anchored(head.Trimmed)
	case v.report.First > head.Trimmed+1:
		return v.report, v.fail(v.firstID, v.report.First, Missing, fmt.Sprintf("%s before the oldest kept entry (seq %d); "+
			"retention removed entries up to %d only", missing(head.Trimmed+1, v.report.First-1), v.report.First, head.Trimmed))
	case head.Seq > last.Seq:
		return v.report, v.fail(v.lastID, last.Seq, Missing, missing(last.Seq+1, head.Seq)+
			fmt.Sprintf(" after it: the store's head is entry %d", head.Seq))
	case head.Seq < last.Seq || head.Hash != last.Hash:
		return v.report, v.fail(v.lastID, last.Seq, Changed, fmt.Sprintf("it is not the head the store records (entry %d, %s): the end of the chain was replaced",
			head.Seq, head.Hash))
	}
	return v.report, v.anchored(head.Trimmed)
}

// anchored checks the anchors against the entries verified; trimmed is
// the seq of the newest entry retention removed, if known.
func (v *Verifier) anchored(trimmed int64) error {
	for i, a := range v.Anchors {
		var got struct{ id, hash string }
		if v.found != nil {
			got = v.found[i]
		}
		first, last := v.report.First, v.report.Last.Seq
		switch {
		case got.id != "" && got.hash == a.Hash:
			continue
		case got.id != "":
			return &AnchorError{Anchor: a, ID: got.id, Hash: got.hash, Detail: fmt.Sprintf("its entry %d (%s) has the hash %s: "+
				"the chain was rewritten at or before that entry", a.Seq, got.id, got.hash)}
		case a.Seq <= trimmed:
			return &AnchorError{Anchor: a, Detail: fmt.Sprintf("retention removed entries up to %d: check against a later head", trimmed)}
		case v.report.Entries == 0:
			return &AnchorError{Anchor: a, Detail: "the trail has no hash-chained entry"}
		case a.Seq > last:
			return &AnchorError{Anchor: a, Detail: fmt.Sprintf("the trail ends at entry %d, before it: "+
				"entries were removed from its end, or the anchor is of a later or another trail", last)}
		default:
			return &AnchorError{Anchor: a, Detail: fmt.Sprintf("the trail starts at entry %d, after it: check against a later head, or a file that holds entry %d", first, a.Seq)}
		}
	}
	return nil
}

func (v *Verifier) fail(id string, seq int64, kind BreakKind, detail string) error {
	v.broken = &BreakError{ID: id, Seq: seq, Kind: kind, Detail: detail}
	return v.broken
}

// missing names a range of missing entries.
func missing(from, to int64) string {
	if from == to {
		return fmt.Sprintf("entry %d is missing", from)
	}
	return fmt.Sprintf("entries %d to %d are missing", from, to)
}
