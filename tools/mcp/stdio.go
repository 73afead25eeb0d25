package mcp

import (
	"bufio"
	"context"
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
// and many servers print something else there all the same: a banner
// before the handshake ("Server running on stdio"), a warning of npm or of
// the language's runtime, a stray print. The SDK's reader ends the
// connection at the first byte that is not JSON, so such a server never
// started ("invalid character 'S' looking for beginning of value"), while
// the reference clients (the TypeScript and Python SDKs) report the line
// and read on. So the bot reads a server's stdout through stdoutFilter: a
// line that does not begin a JSON object or array is left out and logged
// (cut, the server's secrets hidden); JSON values pass as they are, over
// several lines too.

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
// not JSON, telling skipped about each (at most maxSkippedKeep bytes of
// it, without its line end).
type stdoutFilter struct {
	r       *bufio.Reader
	skipped func(line []byte)

	state   filterState
	depth   int  // in a value: the brackets open
	str     bool // in a value: inside a string
	escaped bool // in a string: after a backslash
	line    []byte
}

type filterState int

const (
	atLineStart filterState = iota // before a line's first byte that is not white space
	inValue                        // passing a JSON value through
	restOfLine                     // passing what follows a value on its line
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
		if f.state == atLineStart {
			b, err := f.r.ReadByte()
			if err != nil {
				return 0, err
			}
			switch b {
			case ' ', '\t', '\r', '\n':
				continue // white space between messages: the decoder needs none of it
			case '{', '[':
				f.state, f.depth, f.str, f.escaped = inValue, 1, false, false
				p[0] = b
				return 1, nil
			}
			f.state, f.line = skipping, append(f.line[:0], b)
			continue
		}
		if _, err := f.r.Peek(1); err != nil {
			if f.state == skipping {
				f.skip()
			}
			return 0, err
		}
		chunk, _ := f.r.Peek(min(len(p), f.r.Buffered()))
		n := len(chunk)
		switch f.state {
		case inValue:
			n = f.scanValue(chunk)
		case restOfLine, skipping:
			for i, b := range chunk {
				if b == '\n' {
					n = i + 1
					break
				}
			}
		}
		if f.state == skipping {
			keep := min(n, maxSkippedKeep-len(f.line))
			if keep > 0 {
				f.line = append(f.line, chunk[:keep]...)
			}
			_, _ = f.r.Discard(n)
			if chunk[n-1] == '\n' {
				f.skip()
			}
			continue
		}
		copy(p, chunk[:n])
		_, _ = f.r.Discard(n)
		if f.state == restOfLine && chunk[n-1] == '\n' {
			f.state = atLineStart
		}
		return n, nil
	}
}

// scanValue follows a JSON value through chunk and returns how much of
// chunk to pass: all of it, or up to the end of the line the value ends
// on (the state is then atLineStart) or up to where it ends (restOfLine).
func (f *stdoutFilter) scanValue(chunk []byte) int {
	for i, b := range chunk {
		switch {
		case f.escaped:
			f.escaped = false
		case f.str:
			switch b {
			case '\\':
				f.escaped = true
			case '"':
				f.str = false
			}
		case b == '"':
			f.str = true
		case b == '{', b == '[':
			f.depth++
		case b == '}', b == ']':
			f.depth--
			if f.depth == 0 {
				f.state = restOfLine
				return i + 1
			}
		}
	}
	return len(chunk)
}

// skip reports the line being left out and starts the next.
func (f *stdoutFilter) skip() {
	line := f.line
	for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == '\r') {
		line = line[:len(line)-1]
	}
	if f.skipped != nil {
		f.skipped(line)
	}
	f.state, f.line = atLineStart, f.line[:0]
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
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	conn := &sdk.IOTransport{
		// The connection is closed by closing stdin (serverInput.Close),
		// not stdout, which the process's exit closes.
		Reader: nopCloser{newStdoutFilter(stdout, t.skipped)},
		Writer: &serverInput{WriteCloser: stdin, cmd: t.cmd, terminate: t.terminate},
	}
	return conn.Connect(ctx)
}

type nopCloser struct{ io.Reader }

func (nopCloser) Close() error { return nil }

// serverInput is a server's stdin; closing it ends the server as the
// specification says: stdin closed, then SIGTERM, then SIGKILL, each
// after terminate.
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
	wait := func() (error, bool) {
		t := time.NewTimer(s.terminate)
		defer t.Stop()
		select {
		case err := <-exited:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if s.cmd.Process.Signal(syscall.SIGTERM) == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := s.cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errUnresponsive
}
