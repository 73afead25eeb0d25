package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// A server of the 2024-11-05 HTTP+SSE transport (a GET opens the stream,
// whose first event names where to post) is reached with transport: sse,
// with its headers, and reconnected when its stream ends.
func TestSSEServer(t *testing.T) {
	p := newInProcess(t)
	var mu sync.Mutex
	var auth []string
	h := sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return p.srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Method+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close) // after the manager's Close, which ends the stream
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  old:\n    url: %s/sse\n    transport: sse\n    headers: {Authorization: \"Bearer ${TOKEN}\"}\n", ts.URL),
		mcp.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	got, err := call(t, m, "old__read", `{"text":"x"}`)
	if err != nil || got != `read: {"text":"x"}` {
		t.Fatalf("old__read = %q, %v; want the server's answer", got, err)
	}
	mu.Lock()
	var methods []string
	for _, a := range auth {
		method, header, _ := strings.Cut(a, " ")
		methods = append(methods, method)
		if header != "Bearer s3cret" {
			t.Errorf("a %s came with Authorization %q, want the configured header", method, header)
		}
	}
	mu.Unlock()
	if len(methods) < 2 || methods[0] != http.MethodGet || methods[1] != http.MethodPost {
		t.Errorf("requests = %v, want the GET of the stream, then POSTs", methods)
	}
	if d := m.Describe(); !strings.Contains(d, "mcp old: up (") {
		t.Errorf("Describe() = %q, want the server up", d)
	}
	// The stream ends (the server restarts): the bot connects again.
	ts.CloseClientConnections()
	waitFor(t, "calls to work after the stream ended", func() bool {
		tool, _, _ := m.Lookup("old__read")
		got, err := tool.(tools.InfoTool).CallWithInfo(context.Background(), tools.CallInfo{}, json.RawMessage(`{"text":"y"}`))
		return err == nil && got == `read: {"text":"y"}`
	})
}

// An HTTP+SSE server whose stream names another origin to post to is not
// followed there: the other host gets neither the server's token nor any
// message, and the server is down with why.
func TestSSEServerNamingAnotherOrigin(t *testing.T) {
	var mu sync.Mutex
	var stolen []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		stolen = append(stolen, r.Method+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer other.Close()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: endpoint\ndata: %s/message?sessionId=1\n\n", other.URL)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(ts.Close)
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  old:\n    url: %s/sse\n    transport: sse\n    headers: {Authorization: \"Bearer ${TOKEN}\"}\n", ts.URL),
		mcp.Options{MinBackoff: time.Hour, ConnectTimeout: 5 * time.Second})
	m.Wait(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if len(stolen) > 0 {
		t.Errorf("the other origin got %q, want nothing", stolen)
	}
	if d := m.Describe(); !strings.Contains(d, "mcp old: down: ") || !strings.Contains(d, "not the server's own origin") || strings.Contains(d, "s3cret") {
		t.Errorf("Describe() = %q, want the server down for naming another origin", d)
	}
}

// The reference server on npm, started with its sse transport, as many
// hosted servers still run: its tools are offered and answer.
func TestEverythingOverSSE(t *testing.T) {
	path := npx(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(path, "-y", "@modelcontextprotocol/server-everything", "sse")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	waitFor(t, "the server to listen", func() bool {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  everything:\n    url: http://%s/sse\n    transport: sse\n", ln.Addr()), mcp.Options{})
	got, err := call(t, m, "everything__echo", `{"message":"over sse"}`)
	if err != nil || got != "Echo: over sse" {
		t.Errorf("everything__echo = %q, %v; want the echo", got, err)
	}
}

// An HTTP+SSE server configured without transport: sse is down, and says
// what to set.
func TestSSEServerWithoutTransportSaysSo(t *testing.T) {
	p := newInProcess(t)
	ts := httptest.NewServer(sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return p.srv }, nil))
	t.Cleanup(ts.Close)
	m := newManager(t, "mcp_servers:\n  old:\n    url: "+ts.URL+"/sse\n", mcp.Options{MinBackoff: time.Hour})
	m.Wait(context.Background())
	if d := m.Describe(); !strings.Contains(d, "mcp old: down: ") || !strings.Contains(d, "set transport: sse") {
		t.Errorf("Describe() = %q, want the server down and the hint", d)
	}
}

// sseInstance is one instance of an HTTP+SSE server: a Go SDK server
// whose tool add counts its runs.
type sseInstance struct {
	name string
	runs atomic.Int32
	h    http.Handler
}

func newSSEInstance(name string) *sseInstance {
	in := &sseInstance{name: name}
	srv := sdk.NewServer(&sdk.Implementation{Name: "sums", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "add", Description: "Adds.", InputSchema: objectSchema},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			in.runs.Add(1)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "added on " + name}}}, nil
		})
	in.h = sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	return in
}

// sseFront is a load balancer in front of HTTP+SSE instances: a stream
// stays on the instance that opened it; every new request goes to the
// current instance, or is answered by refuse when it is set and the
// request is a tools/call. It counts the tools/call POSTs, and those
// answered 4xx.
type sseFront struct {
	current       atomic.Pointer[sseInstance]
	refuse        atomic.Pointer[func(http.ResponseWriter)]
	calls, denied atomic.Int32
}

func (f *sseFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		f.current.Load().h.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if !bytes.Contains(body, []byte(`"tools/call"`)) {
		f.current.Load().h.ServeHTTP(w, r)
		return
	}
	f.calls.Add(1)
	rec := httptest.NewRecorder()
	if refuse := f.refuse.Load(); refuse != nil {
		(*refuse)(rec)
	} else {
		f.current.Load().h.ServeHTTP(rec, r)
	}
	if rec.Code >= 400 && rec.Code < 500 {
		f.denied.Add(1)
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func newSSEFront(t *testing.T, first *sseInstance) (*sseFront, *mcp.Manager) {
	f := &sseFront{}
	f.current.Store(first)
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	m := newManager(t, "mcp_servers:\n  sums:\n    url: "+ts.URL+"/sse\n    transport: sse\n",
		mcp.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if got, err := call(t, m, "sums__add", `{"text":"1+1"}`); err != nil || got != "added on "+first.name {
		t.Fatalf("sums__add = %q, %v; want it added on %s", got, err, first.name)
	}
	return f, m
}

// An HTTP+SSE server that no longer knows the session (it restarted, or
// another instance took the POST) answers the call's POST 404 "session
// not found" (the Go SDK's words; the TypeScript SDK's examples answer
// 400 "No transport found for sessionId"): it did not take the call. The
// bot begins a new session and sends the call there, once: it runs once,
// on the instance that answered.
func TestSSEServerThatForgotTheSession(t *testing.T) {
	a, b := newSSEInstance("a"), newSSEInstance("b")
	f, m := newSSEFront(t, a)
	f.current.Store(b) // a's stream stays open; b does not know its session
	got, err := call(t, m, "sums__add", `{"text":"1+1"}`)
	if err != nil || got != "added on b" {
		t.Fatalf("sums__add after the session was forgotten = %q, %v; want it added on b", got, err)
	}
	if ra, rb := a.runs.Load(), b.runs.Load(); ra != 1 || rb != 1 {
		t.Errorf("runs: a %d, b %d; want 1 and 1", ra, rb)
	}
	// The first call; the second refused, then sent once more.
	if n, d := f.calls.Load(), f.denied.Load(); n != 3 || d != 1 {
		t.Errorf("the servers got %d calls, %d refused; want 3 and 1", n, d)
	}
}

// A call whose POST is refused for any other reason fails with the
// server's words and is not sent again; nor is a call refused for its
// session a second time, in the new session.
func TestSSEServerRefusingACall(t *testing.T) {
	for _, tt := range []struct {
		name, status, body string
		code               int
		posts              int32
		want               string
	}{
		{name: "other", code: http.StatusBadRequest, body: "Bad Request: rate limited, try later", posts: 1,
			want: `MCP server "sums": calling "tools/call": failed to write: 400 Bad Request: Bad Request: rate limited, try later`},
		{name: "server error", code: http.StatusInternalServerError, body: "No transport found for sessionId", posts: 1,
			want: "failed to write: 500 Internal Server Error: No transport found for sessionId"},
		{name: "refused again", code: http.StatusBadRequest, body: "No transport found for sessionId", posts: 2,
			want: `MCP server "sums": the server forgot the session before it took the call; the call was not run`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := newSSEInstance("a")
			f, m := newSSEFront(t, in)
			refuse := func(w http.ResponseWriter) { http.Error(w, tt.body, tt.code) }
			f.refuse.Store(&refuse)
			_, err := call(t, m, "sums__add", `{"text":"1+1"}`)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("sums__add refused = %v; want %q", err, tt.want)
			}
			if tt.posts == 2 && !errors.Is(err, mcp.ErrSessionLost) {
				t.Errorf("sums__add refused twice = %v; want it to wrap ErrSessionLost", err)
			}
			if n := f.calls.Load(); n != 1+tt.posts {
				t.Errorf("the server got %d calls, want %d: the first, then %d", n, 1+tt.posts, tt.posts)
			}
			if r := in.runs.Load(); r != 1 {
				t.Errorf("the tool ran %d times, want once (the first call)", r)
			}
		})
	}
}
