package redisstore

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"sync"

	kflate "github.com/klauspost/compress/flate"
)

// Checkpoints in the history are stored compressed: a paused thread keeps
// several, each holding its state's JSON, and they are most of what a
// thread costs in Redis memory. A stored checkpoint is either plain JSON
// (it starts with "{": written before compression, and still read) or
// a marker byte followed by the JSON compressed with DEFLATE and the
// marker's preset dictionary: metaFlateV1 and metaDictV1 (still read),
// metaFlateV2 and metaDictV2 (written). A dictionary must never change:
// a new one gets a new marker.
const (
	metaFlateV1 = 0x01
	metaFlateV2 = 0x02
)

// metaDictV1 holds fragments that checkpoints repeat: the graph's and the
// agent's JSON field names and common values, most frequent last.
const metaDictV1 = `"error":"config":{"interrupt_before":"skip_before":"queued":` +
	`"edited_args":"decision":{"kind":"by":"at":"is_error":true,"notes":[{"text":"turn_by":"team":` +
	`"keep_until":"deadline":"payload":[{"interrupts":[{"id":"path":["tools"],"reason":"approval",` +
	`"status":"failed","status":"rejected","status":"approved","status":"running","status":"done",` +
	`"needs_approval":true,"expires":"2026-11-22T11:00:00Z","attempts":1},{"result":"` +
	`{"key":"0.0","id":"call_0_0","tool":"http_request","args":{"method":"GET","url":"https://` +
	`"requester":"U0","reason":"","status":"pending","calls":[` +
	`"turns":1,"pass_turns":1},"journal_len":2,"created":"2026-11-22T10:00:00Z"}` +
	`{"v":1,"thread":"T0:C0:1700000000.000100","id":"","parent":"","seq":1,"step":1,` +
	`"status":"paused","next":["tools"],"next":["model"],"state":{"thread":"T0:C0:1700000000.000100",` +
	`"requester":"U0","channel":"C0",`

// metaDictV2 is metaDictV1 followed by a whole checkpoint of a run paused
// on an approval, as the agent writes it — fingerprint, interrupt and
// its payload, the call with its rule and times, the counters — with its
// IDs and times blanked: a paused thread's checkpoint, the one kept for
// days, then costs little more than its IDs, times and texts (about 190
// bytes instead of 265 with metaDictV1, which saves a size class of the
// history's memory).
const metaDictV2 = metaDictV1 +
	`"attempts":1,"reason":"","notes":[{"text":"` +
	`{"v":2,"thread":"T0:C0:1700000000.000100","id":"","parent":"","seq":1,"step":1,"status":"paused","next":["tools"],` +
	`"fp":{"g":"","n":{"tools":""},"p":{"tool:http_request":""},"sv":1},"interrupts":[{"id":"1:tools","path":["tools"],` +
	`"reason":"approval","payload":[{"key":"0.0","id":"call_0_0","tool":"http_request","status":"pending",` +
	`"expires":"2026-11-27T09:00:00.000000000Z"}],"deadline":"2026-11-27T09:00:00.000000000Z"}],` +
	`"state":{"thread":"T0:C0:1700000000.000100","requester":"U0","channel":"C0","team":"T0","calls":[{"key":"0.0",` +
	`"id":"call_0_0","tool":"http_request","args":{"method":"GET","url":"https://"},"requester":"U0","status":"pending",` +
	`"needs_approval":true,"rule":{"self_approval":true},"since":"2026-11-26T09:00:00.000000000Z",` +
	`"expires":"2026-11-27T09:00:00.000000000Z"}],"turns":1,"pass_turns":1},"journal_len":2,` +
	`"created":"2026-11-26T09:00:00.000000000Z","keep_until":"2026-11-27T09:00:00.000000000Z"}`

// Written with klauspost/compress, which writes the same format as the
// standard library's DEFLATE (read with it below) in about half the
// time; a save compresses on the request's path.
//
// The writers know only the end of metaDictV2, the whole paused
// checkpoint past metaDictV1: a writer learns its dictionary again for
// every checkpoint (Reset), at a cost that grows with the dictionary's
// length, and that was nearly half of what compressing a checkpoint
// cost. Without metaDictV1's fragments a paused checkpoint comes out a
// little smaller and the others a little larger (about 4% each way).
// What is written is read with the whole dictionary, as a writer's
// back-references only reach the end it knows, where the reader has
// the same bytes.
var metaWriters = newFlateWriters(5, metaDictV2[len(metaDictV1):])

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

// flateReaders holds idle readers; a reader is reset with the
// dictionary of what it reads.
var flateReaders = sync.Pool{New: func() any {
	return flate.NewReaderDict(bytes.NewReader(nil), []byte(metaDictV2))
}}

// compressMeta returns the stored form of a checkpoint's JSON: never
// larger than the JSON.
func compressMeta(meta []byte) []byte {
	if out, ok := metaWriters.deflate(metaFlateV2, meta); ok {
		return out
	}
	return meta
}

// expandMeta returns a stored checkpoint's JSON.
func expandMeta(stored []byte) ([]byte, error) {
	var dict string
	switch {
	case len(stored) == 0:
		return stored, nil
	case stored[0] == metaFlateV1:
		dict = metaDictV1
	case stored[0] == metaFlateV2:
		dict = metaDictV2
	default:
		return stored, nil
	}
	r := flateReaders.Get().(io.ReadCloser)
	defer flateReaders.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(stored[1:]), []byte(dict)); err != nil {
		return nil, fmt.Errorf("expand checkpoint: %w", err)
	}
	var out bytes.Buffer
	out.Grow(3 * len(stored))
	if _, err := io.Copy(&out, r); err != nil {
		return nil, fmt.Errorf("expand checkpoint: %w", err)
	}
	return out.Bytes(), nil
}
