package redisstore

import (
	"bytes"
	"testing"
)

// FuzzExpandMeta: whatever a history entry holds, reading it never
// panics, and what was compressed reads back exactly; plain JSON written
// before compression reads back as it is.
func FuzzExpandMeta(f *testing.F) {
	f.Add([]byte(`{"v":1,"thread":"T1:C1:1700000000.000100","id":"a","seq":1,"status":"paused","state":{}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte{metaFlateV1})
	f.Add([]byte{metaFlateV1, 0xff, 0x00})
	f.Add(compressMeta([]byte(`{"v":1,"thread":"x","state":{"calls":[{"key":"0.0","status":"pending"}]}}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = expandMeta(data)
		if len(data) > 0 && data[0] == metaFlateV1 {
			return
		}
		stored := compressMeta(data)
		got, err := expandMeta(stored)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("expandMeta(compressMeta(%q)) = %q, %v", data, got, err)
		}
	})
}
