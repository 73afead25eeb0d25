package redisstore

import (
	"bytes"
	"testing"

	kflate "github.com/klauspost/compress/flate"
)

// FuzzExpandMeta: whatever a history entry holds, reading it never
// panics, and what was compressed reads back exactly; plain JSON written
// before compression reads back as it is.
func FuzzExpandMeta(f *testing.F) {
	f.Add([]byte(`{"v":1,"thread":"T1:C1:1700000000.000100","id":"a","seq":1,"status":"paused","state":{}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte{metaFlateV1})
	f.Add([]byte{metaFlateV1, 0xff, 0x00})
	f.Add([]byte{metaFlateV2})
	f.Add(compressMeta([]byte(`{"v":1,"thread":"x","state":{"calls":[{"key":"0.0","status":"pending"}]}}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = expandMeta(data)
		if len(data) > 0 && (data[0] == metaFlateV1 || data[0] == metaFlateV2) {
			return
		}
		stored := compressMeta(data)
		got, err := expandMeta(stored)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("expandMeta(compressMeta(%q)) = %q, %v", data, got, err)
		}
	})
}

// pausedMeta is a checkpoint of a run paused on an approval, as the agent
// writes it.
const pausedMeta = `{"v":2,"thread":"T0TEST:C0TEST:1700000000.000100","id":"f9061c8547e156e4","seq":1,"step":1,"status":"paused","next":["tools"],"fp":{"g":"df3d2e652a24","n":{"tools":"7bc037c6ec22"},"p":{"tool:http_request":"968a1d74ca24"},"sv":1},"interrupts":[{"id":"1:tools","path":["tools"],"reason":"approval","payload":[{"key":"0.0","id":"call_1","tool":"http_request","status":"pending","expires":"2026-11-27T09:53:57.503626873Z"}],"deadline":"2026-11-27T09:53:57.503626873Z"}],"state":{"thread":"T0TEST:C0TEST:1700000000.000100","requester":"U0ALICE","channel":"C0TEST","team":"T0TEST","calls":[{"key":"0.0","id":"call_1","tool":"http_request","args":{"method":"GET","url":"https://status.example.com/health"},"requester":"U0ALICE","status":"pending","needs_approval":true,"rule":{"self_approval":true},"since":"2026-11-26T09:53:57.503626813Z","expires":"2026-11-27T09:53:57.503626873Z"}],"turns":1,"pass_turns":1},"journal_len":2,"created":"2026-11-26T09:53:57.503776493Z","keep_until":"2026-11-27T09:53:57.503626873Z"}`

// A paused thread's checkpoint is stored in at most 200 bytes (1,009 of
// JSON), and those stored by earlier versions still read: with the
// first dictionary, and with the whole of the second one primed.
func TestPausedCheckpointCompressed(t *testing.T) {
	stored := compressMeta([]byte(pausedMeta))
	if len(stored) > 200 {
		t.Errorf("a paused checkpoint of %d bytes is stored in %d; want at most 200", len(pausedMeta), len(stored))
	}
	if got, err := expandMeta(stored); err != nil || string(got) != pausedMeta {
		t.Errorf("expandMeta(compressMeta()) = %q, %v", got, err)
	}
	for _, earlier := range []struct {
		name   string
		marker byte
		dict   string
	}{
		{"the first dictionary", metaFlateV1, metaDictV1},
		{"the whole second dictionary", metaFlateV2, metaDictV2},
	} {
		var old bytes.Buffer
		old.WriteByte(earlier.marker)
		w, err := kflate.NewWriterDict(&old, 5, []byte(earlier.dict))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(pausedMeta)); err != nil || w.Close() != nil {
			t.Fatal(err)
		}
		if got, err := expandMeta(old.Bytes()); err != nil || string(got) != pausedMeta {
			t.Errorf("expandMeta(stored with %s) = %q, %v", earlier.name, got, err)
		}
	}
}
