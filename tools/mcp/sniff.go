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

// The SDK's Tool has no field for a tool's execution (execution.taskSupport
// of the tasks extension): what a server says of it is read from the
// tools/list results as they arrive, before the SDK decodes them. A tool
// whose taskSupport is "required" can only be run as a task, which the SDK
// cannot do: it is not offered (see server.refresh).

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

// observeMessage reads one JSON-RPC message off the wire.
func (e *executions) observeMessage(data []byte) {
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return
	}
	if r, ok := msg.(*jsonrpc.Response); ok && r.Error == nil {
		e.observe(r.Result)
	}
}

// sniffTransport shows a stdio connection's responses to e. (The stdio
// connection has nothing the SDK asks of a client connection beside
// sdk.Connection, so wrapping it changes nothing else.)
type sniffTransport struct {
	sdk.Transport
	e *executions
}

func (t sniffTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return sniffConn{Connection: c, e: t.e}, nil
}

type sniffConn struct {
	sdk.Connection
	e *executions
}

func (c sniffConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if r, ok := msg.(*jsonrpc.Response); ok && err == nil && r.Error == nil {
		c.e.observe(r.Result)
	}
	return msg, err
}

// sniffHTTP shows the JSON-RPC messages of an HTTP server's answers (a
// JSON body, or the data lines of an event stream) to e, as they are
// read. It keeps at most maxSniff bytes of one message.
type sniffHTTP struct {
	next http.RoundTripper
	e    *executions
}

const maxSniff = 4 << 20

func (s sniffHTTP) RoundTrip(r *http.Request) (*http.Response, error) {
	next := s.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost || resp.Body == nil {
		return resp, err
	}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/json"):
		resp.Body = &sniffBody{ReadCloser: resp.Body, e: s.e}
	case strings.HasPrefix(ct, "text/event-stream"):
		resp.Body = &sniffBody{ReadCloser: resp.Body, e: s.e, events: true}
	}
	return resp, nil
}

// sniffBody passes a body through, and shows what it read to e.
type sniffBody struct {
	io.ReadCloser
	e      *executions
	events bool
	buf    []byte
	over   bool // the current message is longer than maxSniff
}

func (b *sniffBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.feed(p[:n])
	if err == io.EOF && !b.events && !b.over {
		b.e.observeMessage(b.buf)
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
		if !b.over {
			line := append(b.buf, p[:i]...)
			if data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:")); ok {
				b.e.observeMessage(bytes.TrimSpace(data))
			}
		}
		b.buf, b.over = b.buf[:0], false
		p = p[i+1:]
	}
}
