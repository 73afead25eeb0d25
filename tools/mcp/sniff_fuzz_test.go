package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
)

// FuzzSniffBody reads a server's answer, split anywhere, as a JSON body
// and as an event stream: it passes through unchanged, nothing panics,
// and a task-only tool in a tools/list result is seen whichever way the
// body was cut.
func FuzzSniffBody(f *testing.F) {
	list := `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}}]}}`
	f.Add([]byte(`{"jsonrpc":"2.0","id":2,"result":{"content":[]}}`), 3)
	f.Add([]byte(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"number"}}}}}`), 10)
	f.Add([]byte("data: {\"x\":\r\n\n"), 1)
	f.Add([]byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"id\":9,\"result\":{}}\n\n"), 7)
	f.Fuzz(func(t *testing.T, extra []byte, cut int) {
		for _, events := range []bool{false, true} {
			body := append(append([]byte{}, extra...), "\n\n"...)
			if events {
				body = append(append(append(body, "data: "...), list...), "\n\n"...)
			} else {
				body = []byte(list)
			}
			var w wireNotes
			b := &sniffBody{ReadCloser: io.NopCloser(&chunked{data: body, n: max(1, cut%64)}), w: &w, events: events}
			got, err := io.ReadAll(b)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("the body changed on its way through: %q, %v", got, err)
			}
			if w.exec.taskSupport("t") != TaskRequired {
				t.Errorf("events=%v: the task-only tool was not seen in %q", events, body)
			}
			var anySchema any
			if json.Unmarshal(extra, &anySchema) == nil {
				_, _ = w.forms.raw(anySchema)
			}
		}
	})
}

// chunked reads data n bytes at a time.
type chunked struct {
	data []byte
	n    int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[k:]
	return k, nil
}

// The schema of a request for input is found as the server wrote it,
// properties in its order, from the map the SDK decodes it into.
func TestFormsKeepTheServersOrder(t *testing.T) {
	var w wireNotes
	w.observeMessage([]byte(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"number","default":1.5}}}}}`))
	decoded := map[string]any{"type": "object", "properties": map[string]any{"alpha": map[string]any{"type": "number", "default": 1.5}, "zeta": map[string]any{"type": "string"}}}
	raw, err := w.forms.raw(decoded)
	if err != nil {
		t.Fatal(err)
	}
	if z, a := bytes.Index(raw, []byte("zeta")), bytes.Index(raw, []byte("alpha")); z < 0 || a < z {
		t.Errorf("schema = %s; want zeta before alpha, as the server wrote it", raw)
	}
}

// An event's data may come in several data lines.
func TestSniffEventOfSeveralDataLines(t *testing.T) {
	var w wireNotes
	stream := "event: message\r\nid: 1\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\r\ndata: \"result\":{\"tools\":[{\"name\":\"t\",\"execution\":{\"taskSupport\":\"required\"}}]}}\r\n\r\n"
	b := &sniffBody{ReadCloser: io.NopCloser(&chunked{data: []byte(stream), n: 5}), w: &w, events: true}
	if _, err := io.ReadAll(b); err != nil {
		t.Fatal(err)
	}
	if w.exec.taskSupport("t") != TaskRequired {
		t.Errorf("the tools/list result in two data lines was not read")
	}
}
