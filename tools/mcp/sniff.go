package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Two things a server says are lost when the SDK decodes its messages, and
// are read from the wire as the messages arrive:
//
//   - The SDK's Tool has no field for a tool's execution
//     (execution.taskSupport of the tasks extension). A tool whose
//     taskSupport is "required" can only be run as a task, which the SDK
//     cannot do: it is not offered (see server.refresh).
//   - A request for input's schema is decoded into a map, which loses the
//     order of its properties: the order the server wants its form in. The
//     schema as the server wrote it is kept (forms), and found again from
//     the decoded one.

// wireNotes is what is read off a server's wire.
type wireNotes struct {
	exec  executions
	forms forms
}

// observe reads one JSON-RPC message from the server.
func (w *wireNotes) observe(msg jsonrpc.Message) {
	switch m := msg.(type) {
	case *jsonrpc.Response:
		if m.Error == nil {
			w.exec.observe(m.Result)
			w.forms.fromResult(m.Result)
		}
	case *jsonrpc.Request:
		if m.Method == "elicitation/create" {
			w.forms.fromParams(m.Params)
		}
	}
}

// observeMessage reads one JSON-RPC message off the wire.
func (w *wireNotes) observeMessage(data []byte) {
	if msg, err := jsonrpc.DecodeMessage(data); err == nil {
		w.observe(msg)
	}
}

// forms are the requested schemas of the latest requests for input, as
// the server wrote them, by their canonical form (keys sorted).
type forms struct {
	mu   sync.Mutex
	keys []string
	m    map[string]json.RawMessage
}

// maxForms is how many schemas forms keeps; a schema is looked for right
// after it arrived.
const maxForms = 32

func canonical(v any) (string, bool) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", false
	}
	var x any
	if json.Unmarshal(b, &x) != nil {
		return "", false
	}
	b, err = json.Marshal(x)
	return string(b), err == nil
}

func (f *forms) add(raw json.RawMessage) {
	if len(raw) == 0 || len(raw) > maxSniff {
		return
	}
	key, ok := canonical(raw)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]json.RawMessage{}
	}
	if _, ok := f.m[key]; !ok {
		f.keys = append(f.keys, key)
	}
	f.m[key] = bytes.Clone(raw)
	for len(f.keys) > maxForms {
		delete(f.m, f.keys[0])
		f.keys = f.keys[1:]
	}
}

// fromParams keeps the schema of an elicitation/create request.
func (f *forms) fromParams(params json.RawMessage) {
	var p struct {
		RequestedSchema json.RawMessage `json:"requestedSchema"`
	}
	if json.Unmarshal(params, &p) == nil {
		f.add(p.RequestedSchema)
	}
}

// fromResult keeps the schemas of a result's input requests (an "input
// required" result).
func (f *forms) fromResult(result json.RawMessage) {
	if !bytes.Contains(result, []byte(`"inputRequests"`)) {
		return
	}
	var r struct {
		InputRequests map[string]struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		} `json:"inputRequests"`
	}
	if json.Unmarshal(result, &r) != nil {
		return
	}
	for _, ir := range r.InputRequests {
		if ir.Method == "elicitation/create" {
			f.fromParams(ir.Params)
		}
	}
}

// raw is the schema as the server wrote it, found from its decoded form;
// else the decoded form, encoded again.
func (f *forms) raw(decoded any) (json.RawMessage, error) {
	key, ok := canonical(decoded)
	if ok {
		f.mu.Lock()
		raw, found := f.m[key]
		f.mu.Unlock()
		if found {
			return raw, nil
		}
	}
	return json.Marshal(decoded)
}

// TaskRequired is taskSupport's value for a tool that runs only as a task.
const TaskRequired = "required"

// executions is what the server last said of its tools' execution, by
// the tool's own name.
type executions struct {
	mu sync.Mutex
	m  map[string]string // tool → taskSupport
}

func (e *executions) taskSupport(tool string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[tool]
}

// observe reads a JSON-RPC result; a tools/list result's tools update the
// map.
func (e *executions) observe(result json.RawMessage) {
	if !bytes.Contains(result, []byte(`"tools"`)) {
		return
	}
	var list struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution *struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	if json.Unmarshal(result, &list) != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]string{}
	}
	for _, t := range list.Tools {
		if t.Name == "" {
			continue
		}
		if t.Execution != nil {
			e.m[t.Name] = t.Execution.TaskSupport
		} else {
			delete(e.m, t.Name)
		}
	}
}

// sniffTransport shows a stdio connection's messages to w. (The stdio
// connection has nothing the SDK asks of a client connection beside
// sdk.Connection, so wrapping it changes nothing else.)
type sniffTransport struct {
	sdk.Transport
	w *wireNotes
}

func (t sniffTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return sniffConn{Connection: c, w: t.w}, nil
}

type sniffConn struct {
	sdk.Connection
	w *wireNotes
}

func (c sniffConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil {
		c.w.observe(msg)
	}
	return msg, err
}

// sniffHTTP shows the JSON-RPC messages of an HTTP server's answers (a
// JSON body, or the data lines of an event stream) to w, as they are
// read. It keeps at most maxSniff bytes of one message.
type sniffHTTP struct {
	next http.RoundTripper
	w    *wireNotes
}

const maxSniff = 4 << 20

func (s sniffHTTP) RoundTrip(r *http.Request) (*http.Response, error) {
	next := s.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/json") && r.Method == http.MethodPost:
		resp.Body = &sniffBody{ReadCloser: resp.Body, w: s.w}
	case strings.HasPrefix(ct, "text/event-stream"):
		resp.Body = &sniffBody{ReadCloser: resp.Body, w: s.w, events: true}
	}
	return resp, nil
}

// sniffBody passes a body through, and shows what it read to w.
type sniffBody struct {
	io.ReadCloser
	w      *wireNotes
	events bool
	buf    []byte
	over   bool // the current message is longer than maxSniff
	// data is the current event's data: its data lines, joined by
	// newlines, until the blank line that ends the event.
	data     []byte
	dataOver bool
}

func (b *sniffBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.feed(p[:n])
	if err == io.EOF && !b.events && !b.over {
		b.w.observeMessage(b.buf)
		b.buf = nil
	}
	return n, err
}

func (b *sniffBody) feed(p []byte) {
	if !b.events {
		if len(b.buf)+len(p) > maxSniff {
			b.over, b.buf = true, nil
		}
		if !b.over {
			b.buf = append(b.buf, p...)
		}
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(b.buf)+len(p) > maxSniff {
				b.over, b.buf = true, nil
			}
			if !b.over {
				b.buf = append(b.buf, p...)
			}
			return
		}
		if b.over {
			b.dataOver = true
		} else {
			b.line(bytes.TrimSuffix(append(b.buf, p[:i]...), []byte("\r")))
		}
		b.buf, b.over = b.buf[:0], false
		p = p[i+1:]
	}
}

// line reads one line of an event stream: a data line adds to the
// event's data, a blank line ends the event.
func (b *sniffBody) line(line []byte) {
	if len(line) == 0 {
		if !b.dataOver && len(b.data) > 0 {
			b.w.observeMessage(b.data)
		}
		b.data, b.dataOver = b.data[:0], false
		return
	}
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || b.dataOver {
		return
	}
	data = bytes.TrimPrefix(data, []byte(" "))
	if len(b.data)+len(data)+1 > maxSniff {
		b.data, b.dataOver = nil, true
		return
	}
	if len(b.data) > 0 {
		b.data = append(b.data, '\n')
	}
	b.data = append(b.data, data...)
}
