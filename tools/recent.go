package tools

import (
	"hash/maphash"
	"sync/atomic"
)

// recent remembers what a function of a small input computed last, for
// ArgsHash and MaskSecrets, which an approval cycle asks about the same
// call many times. Each slot, chosen by the input's maphash, holds one
// input and its result; the input is compared whole, so a slot shared
// by two inputs gives each its own result, never the other's. It is safe
// for concurrent use.
type recent[V any] struct {
	slots []atomic.Pointer[remembered[V]]
}

// remembered is an input and what was computed from it.
type remembered[V any] struct {
	in string
	v  V
}

// maxRememberedInput is the longest input (a tool's name, a zero byte,
// its arguments) whose result is remembered; a longer one is computed
// each time.
const maxRememberedInput = 512

var recentSeed = maphash.MakeSeed()

func newRecent[V any](slots int) *recent[V] {
	return &recent[V]{slots: make([]atomic.Pointer[remembered[V]], slots)}
}

// key writes the input of tool and args into buf, and says whether it is
// short enough to be remembered.
func key(buf *[maxRememberedInput]byte, tool string, args []byte) ([]byte, bool) {
	in := append(append(append(buf[:0], tool...), 0), args...)
	return in, len(in) <= maxRememberedInput
}

func (r *recent[V]) slot(in []byte) *atomic.Pointer[remembered[V]] {
	return &r.slots[maphash.Bytes(recentSeed, in)%uint64(len(r.slots))]
}

// get returns what was remembered for in, if anything.
func (r *recent[V]) get(in []byte) (V, bool) {
	if m := r.slot(in).Load(); m != nil && m.in == string(in) {
		return m.v, true
	}
	var zero V
	return zero, false
}

// put remembers v for in, in place of what its slot held.
func (r *recent[V]) put(in []byte, v V) {
	r.slot(in).Store(&remembered[V]{in: string(in), v: v})
}
