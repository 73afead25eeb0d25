package redisstore

import (
	"bytes"
	"compress/flate"
	_ "embed" // metaDictV3
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Checkpoints in the history are stored compressed: a paused thread keeps
// several, each holding its state's JSON, and they are most of what a
// thread costs in Redis memory. A stored checkpoint is either plain JSON
// (it starts with "{": written before compression, and still read) or a
// marker byte followed by the JSON compressed:
//
//   - metaS2V3 (written): an S2 block (klauspost/compress/s2) encoded
//     with the dictionary metaDictV3;
//   - metaZstdV3 (written for a paused checkpoint by earlier versions,
//     still read): a Zstandard frame without its 4-byte magic number (the
//     marker names the format), with the dictionary metaZstdDictV3, which
//     has metaDictV3's content;
//   - metaFlateV1, metaFlateV2 (written by earlier versions, still read):
//     DEFLATE with the preset dictionary metaDictV1 or metaDictV2.
//
// A dictionary must never change: a new one gets a new marker.
//
// A save compresses on the request's path, and a checkpoint is a few
// hundred bytes that are mostly what the dictionary holds. DEFLATE (what
// was written before) learnt its dictionary again for every checkpoint
// and wrote a Huffman table of its own for each. S2 finds the
// dictionary's matches with a table made once and codes no entropy: a
// fifth to a tenth of DEFLATE's time, and fewer bytes as long as the
// checkpoint's IDs have the lengths of the dictionary's. Zstandard codes
// what is left over with the dictionary's entropy tables, a few bytes
// fewer for a paused checkpoint, but it restores a 256 KB match table
// before every input: about 20 times S2's time, the largest cost of a
// turn-1 approval cycle's compression, for a few percent of a paused
// thread's memory. Every checkpoint is now written with S2.
const (
	metaFlateV1 = 0x01
	metaFlateV2 = 0x02
	metaS2V3    = 0x03
	metaZstdV3  = 0x04
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

// metaDictV3 is an S2 dictionary (s2.Dict.Bytes) of four whole
// checkpoints that the bot's own wiring saved, their times replaced by
// one of no day: a thread's turn-100 answer, the claim of an approved
// call, a long thread's pause and last, nearest, a new thread paused on
// an approval. The program internal/metadict is how it was made; made
// again it comes out different (other IDs), and would need a new marker.
//
//go:embed compress_v3.dict
var metaDictV3Bytes []byte

// metaDictV3 is safe for concurrent use: its match table is made once,
// by the first checkpoint compressed.
var metaDictV3 = s2.NewDict(metaDictV3Bytes)

// metaZstdDictV3 is a Zstandard dictionary (ID metaZstdDictV3ID) with
// metaDictV3's content and entropy tables fitted to the checkpoints it
// was made from, by internal/metadict too.
//
//go:embed compress_v3.zstd
var metaZstdDictV3 []byte

const metaZstdDictV3ID = 3

// metaMax bounds the JSON stored compressed: a larger checkpoint (none
// is near it: the messages are in the journal, and a call's result is
// capped) is stored as it is, and a stored block or frame that says it
// holds more is refused rather than given the memory.
const metaMax = 16 << 20

// zstdMagic starts every Zstandard frame; metaZstdV3 does not store it.
const zstdMagic = "\x28\xb5\x2f\xfd"

// The Zstandard decoder, for checkpoints stored by earlier versions, is
// shared and safe for concurrent use; it keeps up to four states, so that
// loads of different threads do not wait for one another.
var (
	zstdStates = min(4, runtime.GOMAXPROCS(0))

	metaZstdDecoder = mustZstd(zstd.NewReader(nil,
		zstd.WithDecoderDicts(metaZstdDictV3),
		zstd.WithDecoderConcurrency(zstdStates),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(metaMax),
		zstd.WithDecoderMaxWindow(metaMax)))
)

// mustZstd panics on an error of the options fixed above, or of the
// dictionary embedded: the tests catch it.
func mustZstd[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("redisstore: zstd: %v", err))
	}
	return v
}

// compressMeta returns the stored form of a checkpoint's JSON, never
// larger than the JSON.
func compressMeta(meta []byte) []byte {
	if len(meta) == 0 || len(meta) > metaMax {
		return meta
	}
	out := s2Meta(meta)
	if out == nil || len(out) >= len(meta) {
		return meta
	}
	return out
}

// s2Meta returns meta stored with metaS2V3.
func s2Meta(meta []byte) []byte {
	buf := encodeBuffers.Get().(*[]byte)
	if n := s2.MaxEncodedLen(len(meta)); cap(*buf) < n {
		*buf = make([]byte, n)
	}
	block := metaDictV3.Encode((*buf)[:cap(*buf)], meta)
	var out []byte
	if 1+len(block) < len(meta) {
		out = make([]byte, 1+len(block))
		out[0] = metaS2V3
		copy(out[1:], block)
	}
	if cap(*buf) <= maxKeptBuffer {
		encodeBuffers.Put(buf)
	}
	return out
}

// encodeBuffers holds buffers that S2 writes a block to, of the size it
// asks for (more than the JSON); what is stored is copied out of them.
// A buffer larger than maxKeptBuffer, for a checkpoint far larger than
// most, is left to the garbage collector.
var encodeBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxKeptBuffer = 64 << 10

// expandMeta returns a stored checkpoint's JSON.
func expandMeta(stored []byte) ([]byte, error) {
	if len(stored) == 0 {
		return stored, nil
	}
	switch stored[0] {
	case metaZstdV3:
		frame := make([]byte, 0, len(zstdMagic)+len(stored)-1)
		frame = append(frame, zstdMagic...)
		frame = append(frame, stored[1:]...)
		out, err := metaZstdDecoder.DecodeAll(frame, nil) // sized by the frame
		if err != nil {
			return nil, fmt.Errorf("expand checkpoint: %w", err)
		}
		return out, nil
	case metaS2V3:
		n, err := s2.DecodedLen(stored[1:])
		if err == nil && n > metaMax {
			err = fmt.Errorf("%d bytes, more than any checkpoint compressed", n)
		}
		var out []byte
		if err == nil {
			out, err = metaDictV3.Decode(nil, stored[1:])
		}
		if err != nil {
			return nil, fmt.Errorf("expand checkpoint: %w", err)
		}
		return out, nil
	case metaFlateV1:
		return inflateMeta(stored[1:], metaDictV1)
	case metaFlateV2:
		return inflateMeta(stored[1:], metaDictV2)
	default:
		return stored, nil
	}
}

// flateReaders holds idle DEFLATE readers; a reader is reset with the
// dictionary of what it reads.
var flateReaders = sync.Pool{New: func() any {
	return flate.NewReaderDict(bytes.NewReader(nil), []byte(metaDictV2))
}}

// inflateMeta returns the JSON of a checkpoint stored with DEFLATE and
// dict by an earlier version.
func inflateMeta(compressed []byte, dict string) ([]byte, error) {
	r := flateReaders.Get().(io.ReadCloser)
	defer flateReaders.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(compressed), []byte(dict)); err != nil {
		return nil, fmt.Errorf("expand checkpoint: %w", err)
	}
	var out bytes.Buffer
	out.Grow(3 * len(compressed))
	if _, err := io.Copy(&out, r); err != nil {
		return nil, fmt.Errorf("expand checkpoint: %w", err)
	}
	return out.Bytes(), nil
}
