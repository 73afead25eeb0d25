package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/llm/llmtest"
)

// everythingHTTP is server-everything in one of its HTTP modes
// (streamableHttp, sse), run with npx on a port of its own, which the
// test can restart.
type everythingHTTP struct {
	t    *testing.T
	mode string
	port int
	cmd  *exec.Cmd
}

func startEverythingHTTP(t *testing.T) *everythingHTTP {
	t.Helper()
	return startEverything(t, "streamableHttp")
}

func startEverything(t *testing.T, mode string) *everythingHTTP {
	t.Helper()
	needs(t, "Node's npx (an MCP server from npm)")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &everythingHTTP{t: t, mode: mode, port: l.Addr().(*net.TCPAddr).Port}
	_ = l.Close()
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *everythingHTTP) start() {
	s.t.Helper()
	npx, err := exec.LookPath("npx")
	if err != nil {
		s.t.Fatalf("npx not found (%v): the MCP tests run servers from npm with Node's npx", err)
	}
	s.cmd = exec.Command(npx, "-y", "@modelcontextprotocol/server-everything", s.mode)
	s.cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(s.port))
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(serverStart)
	for {
		c, err := net.DialTimeout("tcp", s.addr(), time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("server-everything did not listen on %s within %s: %v", s.addr(), serverStart, err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the port, not waiting for time
	}
}

func (s *everythingHTTP) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// stop kills npx and the server it started, and waits until its port
// refuses connections: npx's node ends after npx, and a start that found
// the old server still listening would take it for the new one.
func (s *everythingHTTP) stop() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
	deadline := time.Now().Add(serverStart)
	for {
		c, err := net.DialTimeout("tcp", s.addr(), time.Second)
		if err != nil {
			return
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			s.t.Errorf("server-everything still listened on %s %s after it was killed", s.addr(), serverStart)
			return
		}
		time.Sleep(20 * time.Millisecond) // polling for the port, not waiting for time
	}
}

// server-everything answers a session it does not know (it restarted)
// with 400 "Bad Request: No valid session ID provided", not 404. A call
// approved after such a restart was refused, not run: the bot begins a
// new session and runs it there, once, and the thread gets its answer.
// The proxy in front refuses the optional GET stream (405), as some
// deployments do, so the call's own request is the first to meet the
// forgotten session.
func TestMCPRealServerRestartAnswering400(t *testing.T) {
	t.Parallel()
	srv := startEverythingHTTP(t)
	target, _ := url.Parse("http://" + srv.addr())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	var calls, refused atomic.Int32 // tools/call requests, and those answered 400
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			http.Error(w, "no stream here", http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !bytes.Contains(body, []byte(`"tools/call"`)) {
			rp.ServeHTTP(w, r)
			return
		}
		calls.Add(1)
		rec := &statusWriter{ResponseWriter: w}
		rp.ServeHTTP(rec, r)
		if rec.status == http.StatusBadRequest {
			refused.Add(1)
		}
	}))
	t.Cleanup(proxy.Close)
	h := newHarness(t, "mcp_servers:\n  everything:\n    url: "+proxy.URL+"/mcp\n    approvers: ["+approver+"]\n")
	sumsAcrossARestart(t, h, func() {
		srv.stop()
		srv.start()
	})
	// The first call once; the second refused (400) once, then sent once more.
	if n, r := calls.Load(), refused.Load(); n != 3 || r != 1 {
		t.Errorf("the server got %d calls, %d of them refused with 400; want 3 and 1: the first, the second refused, the second again", n, r)
	}
}

// sumsAcrossARestart has the bot add two sums with server-everything's
// get-sum, each call approved and answered in a conversation of its own,
// with restart (the server restarted behind the bot) between them; the
// model must be told the server's second sum.
func sumsAcrossARestart(t *testing.T, h *harness, restart func()) {
	t.Helper()
	h.model.Then(
		llmtest.Reply("Adding.", llmtest.Call("c1", "everything__get-sum", `{"a":2,"b":3}`)),
		llmtest.Reply("2 + 3 = 5."),
		llmtest.Reply("Adding again.", llmtest.Call("c2", "everything__get-sum", `{"a":40,"b":2}`)),
		llmtest.Reply("40 + 2 = 42."),
	)
	h.command("what is 2 + 3?", nil, nil)
	root := h.root(1)
	h.click(h.cardWith(root, "approve", serverStart), "approve", approver)
	h.reply(root, "2 + 3 = 5.")

	restart()

	h.command("what is 40 + 2?", nil, nil)
	root = h.root(2)
	h.click(h.cardWith(root, "approve", serverStart), "approve", approver)
	h.reply(root, "40 + 2 = 42.")
	if got := lastToolResult(t, h); !strings.Contains(got, "42") {
		t.Errorf("the model was told %q after the server restarted; want the server's sum", got)
	}
}

// statusWriter notes the status of an answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
