package jsonform

import (
	"hash/maphash"
	"sync/atomic"
)

// Name reads a string as StrOrUnmarshal does, for the short strings a
// state holds again at each save: a thread's, a person's or a tool's
// name, a call's key. One read lately (without escapes) is returned as
// the string it was read as then, not copied again, so that decoding a
// state does not allocate anew for each of its names.
func (r *Reader) Name() (string, bool) {
	r.name = true
	s, ok := r.StrOrUnmarshal()
	r.name = false
	return s, ok
}

// maxName is the longest string Name remembers.
const maxName = 64

// names are the strings Name read lately. Each slot, chosen by the
// text's maphash, holds one string, compared whole: a slot shared by
// two texts gives each its own text, never the other's. Strings do not
// change, so a slot's string is shared safely.
var names [1024]atomic.Pointer[string]

var nameSeed = maphash.MakeSeed()

// recentName is string(b), the same string as before if b was read
// lately.
func recentName(b []byte) string {
	if len(b) == 0 || len(b) > maxName {
		return string(b)
	}
	slot := &names[maphash.Bytes(nameSeed, b)%uint64(len(names))]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}
