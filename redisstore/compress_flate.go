package redisstore

import (
	"bytes"

	kflate "github.com/klauspost/compress/flate"
)

// References (refs.go) are still written with DEFLATE and a preset
// dictionary, by the writers below; checkpoints were too, before
// metaZstdV3. They are written with klauspost/compress, which writes the
// same format as the standard library's DEFLATE (read with it) in about
// half the time.

// flateWriters keeps the idle DEFLATE writers of one level and preset
// dictionary, ready for their next input: a writer learns its
// dictionary (Reset) when it is put back, on a goroutine of its own,
// rather than when it is taken, so that a save does not wait for it;
// the save then waits for Redis, and the writer is ready by the next
// one. A writer holds large tables, so idle ones are kept in a channel
// rather than a sync.Pool, which would drop them at every garbage
// collection.
type flateWriters struct {
	level int
	dict  []byte
	idle  chan *flateWriter
}

// flateWriter is a writer that has learnt its dictionary, and the
// buffer it writes to, which holds nothing yet.
type flateWriter struct {
	w   *kflate.Writer
	out *bytes.Buffer
}

func newFlateWriters(level int, dict string) *flateWriters {
	return &flateWriters{level: level, dict: []byte(dict), idle: make(chan *flateWriter, 16)}
}

// ready readies fw (a new one if nil) for its next input, with a buffer
// of its own: the last one is its caller's.
func (f *flateWriters) ready(fw *flateWriter) *flateWriter {
	out := new(bytes.Buffer)
	if fw == nil {
		w, err := kflate.NewWriterDict(out, f.level, f.dict)
		if err != nil {
			panic(err) // only for an invalid level
		}
		return &flateWriter{w: w, out: out}
	}
	fw.out = out
	fw.w.Reset(out)
	return fw
}

// putBack readies fw and keeps it, unless enough are kept.
func (f *flateWriters) putBack(fw *flateWriter) {
	f.ready(fw)
	select {
	case f.idle <- fw:
	default:
	}
}

// deflate returns marker followed by b compressed, and whether that is
// smaller than b.
func (f *flateWriters) deflate(marker byte, b []byte) ([]byte, bool) {
	var fw *flateWriter
	select {
	case fw = <-f.idle:
	default:
		fw = f.ready(nil)
	}
	buf := fw.out
	buf.Grow(len(b)/2 + 16)
	buf.WriteByte(marker) // before what the writer writes: it has written nothing yet
	_, err := fw.w.Write(b)
	if err == nil {
		err = fw.w.Close()
	}
	go f.putBack(fw)
	if err != nil || buf.Len() >= len(b) {
		return nil, false // writing to a buffer does not fail
	}
	return buf.Bytes(), true
}
