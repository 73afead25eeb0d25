package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A streamable HTTP server may forget a session at any time (it restarted,
// or it expires idle sessions, or another instance behind a load balancer
// took the request) and then answers a request of that session with 404.
// The SDK takes that as the end of the connection, and the server's run
// loop connects again. A call whose own request was answered 404 was not
// run: it is sent once more, in the new session, with the same
// idempotency key. A call whose request the server did take and whose
// session was then lost may or may not have run: it is never sent again
// here (tools.ErrOutcomeUnknown).
//
// Several servers answer a forgotten session with 400 instead (the
// TypeScript SDK's examples and the servers built on them, such as
// server-everything: "Bad Request: No valid session ID provided"; older
// Python SDK servers, in plain text). A 400 to a request that carried a
// session ID, whose body clearly says the session is unknown, invalid or
// expired, or that the server has none (not initialized), is taken as
// that 404 (sessionGone); any other 400 is left as it is, and its call
// fails without being sent again. So is a 404 whose body is a JSON-RPC
// error with an ID that says the session is not found: the SDK reads such
// a body as the request's own error (a 404 with one is also how the
// newest protocol says "method not found"), and would fail the call while
// keeping the dead session.

// A server of the older HTTP+SSE transport (2024-11-05) forgets a
// session the same ways, and then answers a POST of it to its message
// endpoint (?sessionId=…) with 400 or 404: the TypeScript SDK's examples
// say "No transport found for sessionId" or "Session not found", the
// Python SDK "Could not find session", the Go SDK "session not found". The
// SDK's client only says "failed to write: 404 Not Found", and its
// connection, whose writes failed, ends once nothing is in flight. So the
// bot reads the answer (ssePosts): a 400 or 404 whose body says the
// session is unknown (sessionUnknown) marks the call's postNote as
// refused for its session, and the call, which the server never took, is
// sent once more in a new session, as for a streamable HTTP server; any
// other answer but 2xx fails the call with the server's words (its status
// and message), and it is not sent again. A server that does not answer
// such a POST at all (server-everything in its SSE mode keeps it waiting)
// gives no such word: its call waits for its timeout, and may or may not
// have run.

// postNote says whether a call's requests may have reached the server: a
// POST of the call answered with anything but 404 (or, on the HTTP+SSE
// transport, anything but a refusal of its session), or that got no
// answer. It travels in the call's context, which the SDK gives its
// requests.
type postNote struct {
	maybeDelivered atomic.Bool
	// sessionRefused: a POST of the call was refused because the server
	// did not know its session (HTTP+SSE).
	sessionRefused atomic.Bool
	// answeredError: a POST of the call was answered with an HTTP error
	// status (400 or above): the server's answer, whatever becomes of
	// the connection after it.
	answeredError atomic.Bool
}

type postNoteKey struct{}

func withPostNote(ctx context.Context) (context.Context, *postNote) {
	n := &postNote{}
	return context.WithValue(ctx, postNoteKey{}, n), n
}

// notePosts records, in the postNote of a request's context, whether a
// POST may have been taken by the server.
type notePosts struct {
	next http.RoundTripper
}

func (p notePosts) RoundTrip(r *http.Request) (*http.Response, error) {
	next := p.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(r)
	if n, ok := r.Context().Value(postNoteKey{}).(*postNote); ok && r.Method == http.MethodPost {
		if err != nil || resp.StatusCode != http.StatusNotFound {
			n.maybeDelivered.Store(true)
		}
		if err == nil && resp.StatusCode >= http.StatusBadRequest {
			n.answeredError.Store(true)
		}
	}
	return resp, err
}

// sessionGone turns a 400 or 404 answered to a request of a session,
// whose body says the server does not know that session, into the plain
// 404 the protocol asks for, so that the SDK ends the connection as for a
// forgotten session and the server's run loop begins a new one. The
// server refused the request before it looked at it: a call answered so
// did not run.
type sessionGone struct {
	next http.RoundTripper
}

// maxErrorBody is how much of an error's body is read to tell why.
const maxErrorBody = 8 << 10

func (g sessionGone) RoundTrip(r *http.Request) (*http.Response, error) {
	next := g.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusNotFound ||
		r.Header.Get("Mcp-Session-Id") == "" {
		return resp, err
	}
	head, readErr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if readErr != nil || !sessionUnknown(head) {
		// As it came: what was read, then the rest.
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
		return resp, err
	}
	_ = resp.Body.Close()
	body := fmt.Sprintf("session not found (the server answered %d: %s)", resp.StatusCode, errorText(head))
	return &http.Response{
		Status: "404 Not Found", StatusCode: http.StatusNotFound,
		Proto: resp.Proto, ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// sessionGoneText matches what servers say of a session they do not know,
// in lower case.
var sessionGoneText = regexp.MustCompile(`\b(?:no valid|invalid|unknown|expired|stale)(?: or [a-z]+)? session\b` +
	`|\bsession(?:[ -]?id)?(?:[ :'"]+[a-z0-9_-]{1,64}['"]?)? (?:(?:is|was|has) )?(?:not found|unknown|invalid|not valid|expired|does not exist|doesn't exist|no longer exists|terminated)\b` +
	`|\bno transport found for session` +
	`|\bcould not find session\b` +
	`|\bserver not initialized\b`)

// sessionUnknown reports whether the body of an HTTP 400 or 404 answered to a
// request of a session says that the server does not know the session:
// a JSON-RPC error's message, a JSON object's "error", "message" or
// "detail", or plain text.
func sessionUnknown(body []byte) bool {
	for _, text := range errorMessages(body) {
		if sessionGoneText.MatchString(strings.ToLower(text)) {
			return true
		}
	}
	return false
}

// errorMessages are what an error body says: the messages of a JSON
// object (a JSON-RPC error's message first), else the body as text, each
// on one line.
func errorMessages(body []byte) []string {
	var texts []string
	var obj struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  string          `json:"detail"`
	}
	if json.Unmarshal(body, &obj) == nil {
		var e struct {
			Message string `json:"message"`
		}
		var s string
		if json.Unmarshal(obj.Error, &e) == nil {
			texts = append(texts, e.Message)
		} else if json.Unmarshal(obj.Error, &s) == nil {
			texts = append(texts, s)
		}
		texts = append(texts, obj.Message, obj.Detail)
	} else {
		texts = append(texts, string(body))
	}
	var out []string
	for _, t := range texts {
		if t = strings.Join(strings.Fields(strings.ToValidUTF8(t, "\uFFFD")), " "); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// errorText is the first of errorMessages, cut to 200 bytes, for an
// error's text.
func errorText(body []byte) string {
	var text string
	if texts := errorMessages(body); len(texts) > 0 {
		text = texts[0]
	}
	if len(text) > 200 {
		text = strings.ToValidUTF8(text[:200], "") + "…"
	}
	return text
}

// ssePosts reads the answers to the POSTs of an HTTP+SSE session (see
// above): a 2xx is passed on; any other answer is passed on with its body
// read into its status line (sseRefusal), which the SDK quotes, and
// noted in the postNote of a call's request.
type ssePosts struct {
	next http.RoundTripper
}

func (p ssePosts) RoundTrip(r *http.Request) (*http.Response, error) {
	next := p.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(r)
	if r.Method != http.MethodPost {
		return resp, err
	}
	n, _ := r.Context().Value(postNoteKey{}).(*postNote)
	if err != nil || resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if n != nil {
			n.maybeDelivered.Store(true)
		}
		return resp, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	gone, status := sseRefusal(resp.StatusCode, body)
	if n != nil {
		if gone {
			n.sessionRefused.Store(true)
		} else {
			n.maybeDelivered.Store(true)
			n.answeredError.Store(resp.StatusCode >= http.StatusBadRequest)
		}
	}
	return &http.Response{
		Status: status, StatusCode: resp.StatusCode,
		Proto: resp.Proto, ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor,
		Header:  http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:    http.NoBody,
		Request: r,
	}, nil
}

// sseRefusal reads an HTTP+SSE server's answer other than 2xx to a POST
// of a session: gone is true when it is a 400 or 404 that says the server
// does not know the session (the POST was not taken); status is the
// answer's status line with what the server said (on one line, cut to 200
// bytes).
func sseRefusal(code int, body []byte) (gone bool, status string) {
	gone = (code == http.StatusBadRequest || code == http.StatusNotFound) && sessionUnknown(body)
	status = strings.TrimSpace(strconv.Itoa(code) + " " + http.StatusText(code))
	if text := errorText(body); text != "" {
		status += ": " + text
	}
	if gone {
		status += " (the server does not know the session)"
	}
	return gone, status
}

// ErrSessionLost is wrapped by the error of a call that was not run
// because the server forgot its session and no new one came in time.
var ErrSessionLost = errors.New("the server forgot the session")

// sessionLost reports whether err (or, on the HTTP+SSE transport, the
// answer to its POST) says the server forgot the session before it took
// the call (n): then the call did not run.
func sessionLost(err error, n *postNote) bool {
	return err != nil && (errors.Is(err, sdk.ErrSessionMissing) || n.sessionRefused.Load()) && !n.maybeDelivered.Load()
}

// nextSession waits, until ctx ends, for a session of the server other
// than old.
func (s *server) nextSession(ctx context.Context, old *session) (*session, error) {
	for {
		s.mu.Lock()
		sess, up := s.sess, s.up
		s.mu.Unlock()
		if sess != nil && sess != old && !sess.closed() {
			return sess, nil
		}
		select {
		case <-up:
		case <-ctx.Done():
			return nil, fmt.Errorf("MCP server %q: %w, and no new session began in time; the call was not run", s.cfg.Name, ErrSessionLost)
		}
	}
}

// setSessionLocked makes sess the server's session, and wakes whoever waits
// for a new one. s.mu is held.
func (s *server) setSessionLocked(sess *session) {
	s.state, s.err, s.sess = Up, nil, sess
	close(s.up)
	s.up = make(chan struct{})
}
