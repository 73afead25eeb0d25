package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// forgetful is a streamable HTTP server that can forget its sessions, as
// a server does when it restarts behind the same address, or expires
// idle sessions: a request of a forgotten session is answered 404 (with
// the go-sdk's body, or the TypeScript SDK's JSON-RPC error).
type forgetful struct {
	srv     *sdk.Server
	url     string
	runs    atomic.Int32 // calls of "count" and "hold" that began
	refused atomic.Int32 // requests of a forgotten session answered with the body
	release chan struct{}

	mu        sync.Mutex
	h         http.Handler
	seen      map[string]bool // session IDs given out
	forgotten map[string]bool
}

func newForgetful(t *testing.T, tsBody bool) *forgetful {
	return newForgetfulBody(t, map[bool]string{true: `{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}`}[tsBody])
}

func newForgetfulBody(t *testing.T, body string) *forgetful {
	return newForgetfulStatus(t, http.StatusNotFound, body)
}

// newForgetfulStatus answers a forgotten session with status and body,
// in which "ID" is the request's JSON-RPC ID.
func newForgetfulStatus(t *testing.T, status int, body string) *forgetful {
	t.Helper()
	f := &forgetful{srv: sdk.NewServer(&sdk.Implementation{Name: "forgetful", Version: "1"}, nil),
		release: make(chan struct{}), seen: map[string]bool{}, forgotten: map[string]bool{}}
	f.srv.AddTool(&sdk.Tool{Name: "count", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			f.runs.Add(1)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "counted"}}}, nil
		})
	f.srv.AddTool(&sdk.Tool{Name: "hold", InputSchema: objectSchema},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			f.runs.Add(1)
			select {
			case <-f.release:
			case <-ctx.Done():
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "held"}}}, nil
		})
	f.h = f.handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sid := r.Header.Get("Mcp-Session-Id")
		f.mu.Lock()
		h, gone := f.h, f.forgotten[sid]
		f.mu.Unlock()
		if gone && body != "" {
			var req struct {
				ID json.RawMessage `json:"id"`
			}
			id := []byte("null")
			if data, _ := io.ReadAll(r.Body); json.Unmarshal(data, &req) == nil && len(req.ID) > 0 {
				id = req.ID
			}
			f.refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write(bytes.ReplaceAll([]byte(body), []byte(`"ID"`), id))
			return
		}
		h.ServeHTTP(sidWriter{w, f}, r)
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(f.release) })
	f.url = ts.URL
	return f
}

func (f *forgetful) handler() http.Handler {
	return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return f.srv }, nil)
}

// forget forgets every session given out so far.
func (f *forgetful) forget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for sid := range f.seen {
		f.forgotten[sid] = true
	}
	f.h = f.handler()
}

// sidWriter notes the session IDs the server gives out.
type sidWriter struct {
	http.ResponseWriter
	f *forgetful
}

func (w sidWriter) Write(p []byte) (int, error) {
	w.note()
	return w.ResponseWriter.Write(p)
}

func (w sidWriter) WriteHeader(code int) {
	w.note()
	w.ResponseWriter.WriteHeader(code)
}

func (w sidWriter) note() {
	if sid := w.Header().Get("Mcp-Session-Id"); sid != "" {
		w.f.mu.Lock()
		w.f.seen[sid] = true
		w.f.mu.Unlock()
	}
}

func (w sidWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// A call to a server that forgot the session (404) was not run: the bot
// begins a new session and sends it there, once; the person who approved
// it sees it done, not failed.
func TestForgottenSessionIsRenewed(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
	}{
		{"go-sdk 404", ""},
		{"typescript-sdk 404", `{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}`},
		{"404 with an error of an ID", `{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Session not found"}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newForgetfulBody(t, tt.body)
			m := newManager(t, "mcp_servers:\n  s:\n    url: "+f.url+"\n", mcp.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
			if got, err := call(t, m, "s__count", `{"text":"1"}`); err != nil || got != "counted" {
				t.Fatalf("first call = %q, %v", got, err)
			}
			f.forget()
			got, err := call(t, m, "s__count", `{"text":"2"}`)
			if err != nil || got != "counted" {
				t.Errorf("call after the server forgot the session = %q, %v; want it run in a new session", got, err)
			}
			if n := f.runs.Load(); n != 2 {
				t.Errorf("the server ran %d calls, want 2: each call once", n)
			}
			if tt.body != "" && f.refused.Load() == 0 {
				t.Errorf("the server never answered a forgotten session with its body: the test tests nothing")
			}
		})
	}
}

// A server that answers a forgotten session with 400 and says so (as
// server-everything and the TypeScript SDK's examples do, and older
// Python SDK servers in plain text) is taken as one that answered 404:
// the call it refused was not run, and is run once in a new session.
func TestForgottenSessionAnswered400IsRenewed(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
	}{
		{"typescript-sdk", `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":"ID"}`},
		{"python-sdk", "Bad Request: No valid session ID provided"},
		{"not initialized", `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newForgetfulStatus(t, http.StatusBadRequest, tt.body)
			m := newManager(t, "mcp_servers:\n  s:\n    url: "+f.url+"\n", mcp.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
			if got, err := call(t, m, "s__count", `{"text":"1"}`); err != nil || got != "counted" {
				t.Fatalf("first call = %q, %v", got, err)
			}
			f.forget()
			for i := 2; i <= 3; i++ {
				got, err := call(t, m, "s__count", `{"text":"x"}`)
				if err != nil || got != "counted" {
					t.Errorf("call %d after the server forgot the session = %q, %v; want it run in a new session", i, got, err)
				}
			}
			if n := f.runs.Load(); n != 3 {
				t.Errorf("the server ran %d calls, want 3: each call once", n)
			}
			if f.refused.Load() == 0 {
				t.Errorf("the server never answered a forgotten session with 400: the test tests nothing")
			}
		})
	}
}

// A 400 that says something else than that the session is unknown is not
// taken for a forgotten session: its call fails, is not sent again, and
// the model is told the server's words.
func TestOther400IsNotResent(t *testing.T) {
	f := newForgetfulStatus(t, http.StatusBadRequest, `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Unsupported protocol version"},"id":"ID"}`)
	m := newManager(t, "mcp_servers:\n  s:\n    url: "+f.url+"\n", mcp.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if got, err := call(t, m, "s__count", `{"text":"1"}`); err != nil || got != "counted" {
		t.Fatalf("first call = %q, %v", got, err)
	}
	f.forget()
	_, err := call(t, m, "s__count", `{"text":"2"}`)
	if err == nil || !strings.Contains(err.Error(), "Unsupported protocol version") || errors.Is(err, mcp.ErrSessionLost) {
		t.Errorf("call answered 400 = %v; want the server's error", err)
	}
	if n := f.runs.Load(); n != 1 {
		t.Errorf("the server ran %d calls, want 1", n)
	}
	if f.refused.Load() == 0 {
		t.Errorf("the server never answered a forgotten session with 400: the test tests nothing")
	}
}

// A call the server took before it forgot the session may have run: it
// is never sent again, and never said not to have run; a call refused
// with 404 meanwhile is sent in the new session.
func TestSessionLostDuringCallIsNotResent(t *testing.T) {
	f := newForgetful(t, false)
	m := newManager(t, "mcp_servers:\n  s:\n    url: "+f.url+"\n    timeout: 5s\n", mcp.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	m.Tools()
	held := make(chan error, 1)
	go func() {
		tool, _, _ := m.Lookup("s__hold")
		info := tools.CallInfo{Thread: "T1:C1:1.0", Call: "0.0", Attempt: 1, Requester: "U1", Channel: "C1"}
		_, err := tool.(tools.InfoTool).CallWithInfo(context.Background(), info, []byte(`{"text":"x"}`))
		held <- err
	}()
	waitFor(t, "the held call to run", func() bool { return f.runs.Load() == 1 })
	f.forget()
	if got, err := call(t, m, "s__count", `{"text":"y"}`); err != nil || got != "counted" {
		t.Errorf("call refused with 404 = %q, %v; want it run in a new session", got, err)
	}
	// The SDK leaves it waiting until its timeout: either way, its
	// outcome is not known.
	if err := <-held; err == nil || errors.Is(err, mcp.ErrSessionLost) ||
		!errors.Is(err, tools.ErrOutcomeUnknown) && !strings.Contains(err.Error(), "may or may not have had its effect") {
		t.Errorf("held call = %v, want an unknown outcome", err)
	}
	if n := f.runs.Load(); n != 2 {
		t.Errorf("the server ran %d calls, want 2: the held one once, the other once", n)
	}
}
