package redisstore

import (
	"errors"
	"fmt"
)

// The head — the latest checkpoint's seq, journal length and ID, which a
// save's compare-and-set checks and a reader compares with what it saw —
// is three fields of the thread's claims hash. It was a hash of its own
// (cs:{<thread>}:head, fields seq, journal_len, id); a key costs a paused
// thread about 200 bytes of Redis memory beside its fields (the key's
// name, its entries in the tables of keys and of expiries), and the
// claims hash is there anyway once a thread has shown anything, with the
// same expiry.
//
// The scripts read the head from the claims hash and, when it is not
// there, from the head key, so that a thread saved by an earlier version
// loads and resumes; its next save writes the head into the claims hash
// and deletes the head key. Both keys are in the thread's slot.
//
// The fields' names begin with "@": claim keys do not (a claim of one of
// these names is refused, ErrReservedKey), and Claims leaves them out.
//
// Beside them, "@exp" holds when the thread's keys expire (unix ms), as
// the last save that set their expiry set it (saveCheckpointLua).
const (
	headSeq = "@seq"
	headLen = "@len"
	headID  = "@id"
	headExp = "@exp"
)

// isHeadField reports whether a field of the claims hash is the head's.
func isHeadField(field string) bool {
	return field == headSeq || field == headLen || field == headID || field == headExp
}

// ErrReservedKey: a claim named a field of the claims hash that holds the
// thread's head.
var ErrReservedKey = errors.New("claim key is reserved for the thread's head")

// checkClaimKeys refuses claim keys that name a field of the head.
func checkClaimKeys(keys ...string) error {
	for _, k := range keys {
		if isHeadField(k) {
			return fmt.Errorf("%w: %q", ErrReservedKey, k)
		}
	}
	return nil
}
