package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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

// postNote says whether a call's requests may have reached the server: a
// POST of the call answered with anything but 404, or that got no answer.
// It travels in the call's context, which the SDK gives its requests.
type postNote struct {
	maybeDelivered atomic.Bool
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
	}
	return resp, err
}

// ErrSessionLost is wrapped by the error of a call that was not run
// because the server forgot its session and no new one came in time.
var ErrSessionLost = errors.New("the server forgot the session")

// sessionLost reports whether err says the server forgot the session
// before it took the call (n): then the call did not run.
func sessionLost(err error, n *postNote) bool {
	return errors.Is(err, sdk.ErrSessionMissing) && !n.maybeDelivered.Load()
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
