package redisstore

import (
	"bytes"
	"testing"
)

// A card's reference reads back as it was stored, compressed when that
// is smaller; one stored as it was, by an earlier version, still reads.
func TestRefEncoding(t *testing.T) {
	t.Parallel()
	card := []byte(`{"thread":"T0TEST:C0TEST:1700000000.000100","call":"0.0","hash":"090461965cdca66749b9f69a8f34c407a990082685e767f906cdb45006d89486"}`)
	stored := compressRef(card)
	if len(stored) > 90 {
		t.Errorf("a card's reference of %d bytes is stored in %d; want at most 90", len(card), len(stored))
	}
	for _, v := range [][]byte{card, []byte(`x`), {}, {refFlate}, {refPlain, 'a'}} {
		got, err := expandRef(compressRef(v))
		if err != nil || !bytes.Equal(got, v) {
			t.Errorf("expandRef(compressRef(%q)) = %q, %v", v, got, err)
		}
	}
	if got, err := expandRef(card); err != nil || !bytes.Equal(got, card) {
		t.Errorf("expandRef(stored as it was) = %q, %v", got, err)
	}
}

// FuzzExpandRef: whatever a reference's key holds, reading it never
// panics, and every value reads back as it was stored.
func FuzzExpandRef(f *testing.F) {
	f.Add([]byte(`{"thread":"T1:C1:1.2","call":"0.0","hash":"ab"}`))
	f.Add([]byte{refFlate, 0xff})
	f.Add([]byte{refPlain})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = expandRef(data)
		got, err := expandRef(compressRef(data))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("expandRef(compressRef(%q)) = %q, %v", data, got, err)
		}
	})
}
