package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/countersign/countersign/llm"
)

// maxBody bounds what the fakes read of a request.
const maxBody = 8 << 20

// step is one answer of a fake server's script: a reply, or a failure
// with an HTTP status.
type step struct {
	reply  llm.Message
	status int
	raw    *Raw
}

// Raw is an answer a fake server sends byte for byte, such as a recorded
// stream (see Recording): a valid request gets it in its turn of the
// script, instead of a reply built from an llm.Message.
type Raw struct {
	// Status defaults to 200.
	Status int
	// ContentType defaults to text/event-stream for a body that starts
	// with "event:", "data:" or ":" (a comment), application/json
	// otherwise.
	ContentType string
	// Header is added to the answer's headers (e.g. Retry-After).
	Header http.Header
	Body   string
}

func (r *Raw) write(w http.ResponseWriter) {
	for k, vs := range r.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	ct := r.ContentType
	if ct == "" {
		ct = "application/json"
		if strings.HasPrefix(r.Body, "event:") || strings.HasPrefix(r.Body, "data:") || strings.HasPrefix(r.Body, ":") {
			ct = "text/event-stream"
		}
	}
	w.Header().Set("Content-Type", ct)
	status := r.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, r.Body) // the client may have gone
}

func (s *script) pushRaw(raws ...Raw) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range raws {
		s.steps = append(s.steps, step{raw: &r})
	}
}

// script is the queue of answers a fake server gives, shared by both
// fakes. Failures are answered before a request is validated (a real
// server that is down does not look at the request); a reply is used
// only by a valid request.
type script struct {
	mu    sync.Mutex
	steps []step
	count int // requests seen, for IDs and messages
	hook  ChunkHook
}

func (s *script) push(replies ...llm.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range replies {
		s.steps = append(s.steps, step{reply: cloneMessage(r)})
	}
}

func (s *script) failNext(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fails := make([]step, n)
	for i := range fails {
		fails[i] = step{status: status}
	}
	s.steps = append(fails, s.steps...)
}

// begin counts a request and returns its number (1-based) and, when the
// next step is a failure, takes and returns its status.
func (s *script) begin() (n, failStatus int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	if len(s.steps) > 0 && s.steps[0].status != 0 {
		failStatus = s.steps[0].status
		s.steps = s.steps[1:]
	}
	return s.count, failStatus
}

// take returns the next reply, or false when the script is exhausted;
// raw is set when the reply is a raw answer.
func (s *script) take() (reply llm.Message, raw *Raw, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.steps) == 0 {
		return llm.Message{}, nil, false
	}
	st := s.steps[0]
	s.steps = s.steps[1:]
	return cloneMessage(st.reply), st.raw, true
}

func (s *script) remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.steps)
}

// exhausted is the error text of a request that finds no reply left. The
// fakes answer it with 400, not 500, so that a client with retries fails
// at once with this message instead of retrying.
func exhausted(n int) string {
	return fmt.Sprintf("llmtest: script exhausted: no reply left for request %d", n)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may have gone; nothing to do then
}

func readBody(r *http.Request) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r.Body, maxBody))
}

// problem is a request the fake rejects with 400.
type problem struct {
	msg   string
	param string // OpenAI's "param" field
	code  string // OpenAI's "code" field, or ""
}

func badf(param, format string, args ...any) *problem {
	return &problem{msg: fmt.Sprintf(format, args...), param: param}
}
