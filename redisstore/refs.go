package redisstore

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"

	kflate "github.com/klauspost/compress/flate"
)

// A reference holds what a button stands for: a small JSON object (the
// thread, the call, the hash of its arguments). An approval card keeps
// its token in its thread's claims instead; references remain for error
// cards, cards redrawn with their approvals, and the approval cards of
// threads paused before, for as long as those are kept. It is stored
// compressed with DEFLATE and the preset dictionary refDict, after the
// marker byte refFlate, when that is smaller (about 78 bytes instead of
// 131, a size class less); a value stored as it was is read as it is,
// and one that begins with a marker byte is stored after refPlain. The
// dictionary must never change: a new one gets a new marker.
const (
	refFlate = 0x01
	refPlain = 0x02
)

// refDict holds what references repeat: their field names, a thread's
// shape, a hash's digits.
const refDict = `{"kind":"elicit","id":"","decision":"approve","round":1,` +
	`{"thread":"T0:C0:1700000000.000100","call":"0.0","hash":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`

// compressRef returns the stored form of a reference's value.
func compressRef(value []byte) []byte {
	if out, ok := refWriters.deflate(refFlate, value); ok {
		return out
	}
	if len(value) > 0 && (value[0] == refFlate || value[0] == refPlain) {
		return append([]byte{refPlain}, value...)
	}
	return value
}

// expandRef returns a reference's value from its stored form.
func expandRef(stored []byte) ([]byte, error) {
	switch {
	case len(stored) == 0:
		return stored, nil
	case stored[0] == refPlain:
		return stored[1:], nil
	case stored[0] != refFlate:
		return stored, nil
	}
	r := flate.NewReaderDict(bytes.NewReader(stored[1:]), []byte(refDict))
	defer r.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("expand reference: %w", err)
	}
	return out, nil
}

// refWriters holds idle writers: references are small and few, so the
// best compression costs little.
var refWriters = newFlateWriters(kflate.BestCompression, refDict)
