package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/tools"
)

// A stdio server's standard output.
//
// The protocol gives a stdio server's stdout to JSON-RPC messages alone,
// one a line, and many servers print something else there all the same: a
// banner before the handshake ("Server running on stdio"), a warning of
// npm or of the language's runtime, a logger's JSON lines. The SDK's
// reader ends the connection at the first line that is not a JSON-RPC
// message ("invalid character 'S' looking for beginning of value",
// "invalid message version tag"), so such a server never started, while
// the reference clients (the TypeScript and Python SDKs) report the line
// and read on. So the bot reads a server's stdout through stdoutFilter:
// a line is passed on when it is a JSON-RPC message (a JSON object with a
// "jsonrpc" member, or a batch: a JSON array), and otherwise left out and
// logged (cut, the server's secrets hidden). A line longer than maxHeld
// that begins as JSON does is passed on unread: it is a large result,
// which the SDK reads as it comes.

// maxHeld bounds a line held to be checked before it is passed on.
const maxHeld = 64 << 10

// maxSkippedLog bounds what is logged of one line left out, and
// maxSkippedLines how many such lines of one connection are logged. The
// filter keeps maxSkippedKeep bytes of a line, so that a secret that
// begins in the part logged is hidden whole.
const (
	maxSkippedLog   = 200
	maxSkippedKeep  = 1024
	maxSkippedLines = 20
)

// stdoutFilter reads a server's stdout and leaves out the lines that are
// not JSON-RPC messages, telling skipped about each (at most
// maxSkippedKeep bytes of it, without its line end).
type stdoutFilter struct {
	r       *bufio.Reader
	skipped func(line []byte)

	state filterState
	held  []byte // holding: the line so far; skipping: what is kept of it
	out   []byte // what is to be passed on before anything else is read
}

type filterState int

const (
	atLineStart filterState = iota // before a line's first byte that is not white space
	holding                        // reading a line that begins as JSON does, to check it
	passing                        // passing the rest of a long line through
	skipping                       // leaving a line out
)

func newStdoutFilter(r io.Reader, skipped func(line []byte)) *stdoutFilter {
	return &stdoutFilter{r: bufio.NewReaderSize(r, 64<<10), skipped: skipped}
}

func (f *stdoutFilter) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(f.out) > 0 {
			n := copy(p, f.out)
			f.out = f.out[n:]
			return n, nil
		}
		if f.state == atLineStart {
			b, err := f.r.ReadByte()
			if err != nil {
				return 0, err
			}
			switch b {
			case ' ', '\t', '\r', '\n':
				continue // white space between messages: the decoder needs none of it
			case '{', '[':
				f.state, f.held = holding, append(f.held[:0], b)
			default:
				f.state, f.held = skipping, append(f.held[:0], b)
			}
			continue
		}
		if _, err := f.r.Peek(1); err != nil {
			switch f.state {
			case holding:
				f.endLine() // a last line without its line end
				continue
			case skipping:
				f.skip()
			}
			return 0, err
		}
		chunk, _ := f.r.Peek(f.r.Buffered())
		if f.state == passing {
			chunk = chunk[:min(len(chunk), len(p))]
		}
		n, eol := len(chunk), false
		if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
			n, eol = i+1, true
		}
		chunk = chunk[:n]
		switch f.state {
		case passing:
			copy(p, chunk)
			_, _ = f.r.Discard(n)
			if eol {
				f.state = atLineStart
			}
			return n, nil
		case holding:
			f.held = append(f.held, chunk...)
			_, _ = f.r.Discard(n)
			switch {
			case eol:
				f.endLine()
			case len(f.held) > maxHeld:
				f.out, f.state = f.held, passing
				f.held = nil
			}
		case skipping:
			if keep := min(n, maxSkippedKeep-len(f.held)); keep > 0 {
				f.held = append(f.held, chunk[:keep]...)
			}
			_, _ = f.r.Discard(n)
			if eol {
				f.skip()
			}
		}
	}
}

// endLine decides on a held line: passed on when it is a JSON-RPC
// message, else left out.
func (f *stdoutFilter) endLine() {
	if isMessage(bytes.TrimSpace(f.held)) {
		f.out, f.held, f.state = f.held, nil, atLineStart
		return
	}
	f.held = f.held[:min(len(f.held), maxSkippedKeep)]
	f.skip()
}

// isMessage reports whether line is a JSON-RPC message: a JSON object
// with a "jsonrpc" member, or an array (a batch, which the SDK checks).
func isMessage(line []byte) bool {
	if !json.Valid(line) {
		return false
	}
	if line[0] == '[' {
		return true
	}
	var m struct {
		Version json.RawMessage `json:"jsonrpc"`
	}
	return json.Unmarshal(line, &m) == nil && m.Version != nil
}

// skip reports the line being left out and starts the next.
func (f *stdoutFilter) skip() {
	line := bytes.TrimRight(f.held, "\r\n")
	if f.skipped != nil {
		f.skipped(line)
	}
	f.state, f.held = atLineStart, f.held[:0]
}

// skippedLines returns the function told of each line of one
// connection's stdout left out: it logs the first maxSkippedLines of
// them, then says once that it logs no more.
func (s *server) skippedLines() func(line []byte) {
	n := 0
	return func(line []byte) {
		n++
		switch {
		case n <= maxSkippedLines:
			s.log.WithField("line", tools.CapText(s.redact(strings.ToValidUTF8(string(line), "\ufffd")), maxSkippedLog)).
				Warn("MCP server wrote a line that is not JSON-RPC to its stdout; it is left out")
		case n == maxSkippedLines+1:
			s.log.Warn("MCP server keeps writing lines that are not JSON-RPC to its stdout; no more of them are logged")
		}
	}
}

// stdioTransport runs a server's command and speaks to it on its stdin
// and stdout, as the SDK's CommandTransport does, but reads its stdout
// through a stdoutFilter.
type stdioTransport struct {
	cmd *exec.Cmd
	// terminate is how long Close waits for the server to exit after
	// its stdin is closed, then after SIGTERM, before SIGKILL.
	terminate time.Duration
	skipped   func(line []byte)
	// workIn is where the server's working directory is made (see
	// startServer); empty: it runs in cmd.Dir.
	workIn string
}

func (t *stdioTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// On Linux under a reaper, which ends the server's processes when
	// the bot dies (reaper_linux.go).
	if err := startServer(t.cmd, reaperGrace(t.terminate), t.workIn); err != nil {
		return nil, err
	}
	conn := &sdk.IOTransport{
		// The connection is closed by closing stdin (serverInput.Close),
		// not stdout, which the process's exit closes.
		Reader: io.NopCloser(newStdoutFilter(stdout, t.skipped)),
		Writer: &serverInput{WriteCloser: stdin, cmd: t.cmd, terminate: t.terminate},
	}
	return conn.Connect(ctx)
}

// serverInput is a server's stdin; closing it ends the server as the
// specification says: stdin closed, then SIGTERM, then SIGKILL, each
// after terminate. Under a reaper (Linux), the SIGTERM goes to the
// reaper, which ends the server's processes itself, with SIGKILL after
// its grace: it is given that grace more before the SIGKILL.
type serverInput struct {
	io.WriteCloser
	cmd       *exec.Cmd
	terminate time.Duration
}

// errUnresponsive: the server outlived SIGKILL's wait.
var errUnresponsive = errors.New("the server process did not exit")

func (s *serverInput) Close() error {
	if err := s.WriteCloser.Close(); err != nil {
		return fmt.Errorf("close the server's stdin: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	wait := func(d time.Duration) (error, bool) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case err := <-exited:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(s.terminate); ok {
		return err
	}
	if s.cmd.Process.Signal(syscall.SIGTERM) == nil {
		if err, ok := wait(s.terminate + reaperGrace(s.terminate)); ok {
			return err
		}
	}
	if err := s.cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(s.terminate); ok {
		return err
	}
	return errUnresponsive
}
