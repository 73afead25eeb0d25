// Package testtarget is the HTTP server that tests point the agent's
// http_request calls at: it counts requests, keeps their bodies, and can
// be made slow or hold a request unanswered, so that a test can assert
// that an approved call ran exactly once, or kill a process while a call
// is in flight. It answers "ok METHOD /path".
package testtarget

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a counting HTTP server, closed when the test ends. It is safe
// for concurrent use.
type Server struct {
	*httptest.Server

	mu     sync.Mutex
	hits   map[string]int      // by "METHOD /path"
	bodies map[string][]string // likewise
	delay  map[string]time.Duration
	hold   string
	// Arrived is closed when the request HoldNext named arrives.
	Arrived chan struct{}
}

// New starts a server.
func New(tb testing.TB) *Server {
	s := &Server{hits: map[string]int{}, bodies: map[string][]string{}, delay: map[string]time.Duration{}, Arrived: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(s.Close)
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Method + " " + r.URL.Path
	s.mu.Lock()
	s.hits[key]++
	s.bodies[key] = append(s.bodies[key], string(body))
	delay := s.delay[r.URL.Path]
	hold := key == s.hold
	if hold {
		s.hold = ""
	}
	s.mu.Unlock()
	if hold {
		// Counted, and never answered: the caller dies or gives up.
		close(s.Arrived)
		<-r.Context().Done()
		return
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	fmt.Fprintf(w, "ok %s", key)
}

// Count returns how many requests arrived for key: "METHOD /path", or
// "/path" for every method.
func (s *Server) Count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if strings.HasPrefix(key, "/") {
		n := 0
		for k, v := range s.hits {
			if _, path, _ := strings.Cut(k, " "); path == key {
				n += v
			}
		}
		return n
	}
	return s.hits[key]
}

// Total returns how many requests arrived in all.
func (s *Server) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.hits {
		n += v
	}
	return n
}

// Bodies returns the bodies of the requests for "METHOD /path", in order.
func (s *Server) Bodies(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bodies[key])
}

// Delay makes requests to path take d to answer (0: at once).
func (s *Server) Delay(path string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay[path] = d
}

// HoldNext makes the next request for "METHOD /path" arrive, be counted,
// close Arrived, and never be answered.
func (s *Server) HoldNext(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = key
}
