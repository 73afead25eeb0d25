package slacktest

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// File is a file a test attaches to a message (AddFile).
type File struct {
	Name     string
	Mimetype string
	Data     []byte
	// Thumbs are the thumbnails Slack made of an image, by their size
	// (1024, 720, 480…): each is served at the file's thumb_<size>.
	Thumbs map[int][]byte
	// URLPrivate, if set, is the url_private the event gives instead of
	// the fake's own: a file on another host.
	URLPrivate string
}

// FileFetch is one request for a file's bytes that the fake's file host
// received.
type FileFetch struct {
	// Path is the request's path: /files-pri/… for a file,
	// /files-tmb/… for a thumbnail.
	Path string
	// Token reports whether the request carried the token the fake takes
	// (RequireToken); a wrong one or none is answered as Slack answers
	// it, with a redirect to its sign-in page.
	Token bool
	// Served reports whether the fake answered with the bytes.
	Served bool
	Time   time.Time
}

// storedFile is a file the fake serves.
type storedFile struct {
	file File
	id   string
}

// RequireToken makes the fake's file host serve files only to requests
// that carry token in their Authorization header ("Bearer token"), as
// Slack's does. Until it is called, any token will do, and none will not.
func (s *Server) RequireToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fileToken = token
}

// FailFiles makes the file host answer every file request with Slack's
// JSON error code (missing_scope for a bot without files:read), HTTP
// 403, until it is called with "".
func (s *Server) FailFiles(code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.filesError = code
}

// AddFile keeps f for the file host to serve and returns its object as a
// message event's "files" list gives it (id, name, mimetype, size, mode,
// url_private and a thumb_<size> for each thumbnail).
func (s *Server) AddFile(f File) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fileSeq++
	id := fmt.Sprintf("F%08d", s.fileSeq)
	base := s.srv.URL
	obj := map[string]any{
		"id": id, "name": f.Name, "title": f.Name, "mimetype": f.Mimetype, "size": len(f.Data), "mode": "hosted",
		"url_private":          base + "/files-pri/" + TeamID + "-" + id + "/" + f.Name,
		"url_private_download": base + "/files-pri/" + TeamID + "-" + id + "/download/" + f.Name,
	}
	if f.URLPrivate != "" {
		obj["url_private"] = f.URLPrivate
	}
	for size := range f.Thumbs {
		obj["thumb_"+strconv.Itoa(size)] = fmt.Sprintf("%s/files-tmb/%s-%s-thumb/%d", base, TeamID, id, size)
	}
	if s.files == nil {
		s.files = map[string]storedFile{}
	}
	s.files[id] = storedFile{file: f, id: id}
	return obj
}

// FileFetches returns the requests the file host received, in order.
func (s *Server) FileFetches() []FileFetch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.fetches)
}

// HoldNextFile keeps the next request to the file host unanswered until
// release is called (or its client gives up); arrived is closed when it
// comes. A test kills the bot during a download with it.
func (s *Server) HoldNextFile() (arrived <-chan struct{}, release func()) {
	h := &hold{arrived: make(chan struct{}), released: make(chan struct{})}
	s.mu.Lock()
	s.fileHold = h
	s.mu.Unlock()
	var once sync.Once
	return h.arrived, func() { once.Do(func() { close(h.released) }) }
}

// serveFile answers a request to the file host: the file's bytes, or a
// thumbnail's, to a request with the token; Slack's redirect to its
// sign-in page to one without.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.fileHold
	s.fileHold = nil
	s.mu.Unlock()
	if h != nil && !h.wait(r) {
		return
	}
	s.mu.Lock()
	token, failing := s.fileToken, s.filesError
	auth := r.Header.Get("Authorization")
	ok := auth != "" && (token == "" || auth == "Bearer "+token)
	var data []byte
	var mimetype string
	found := false
	if ok && failing == "" {
		data, mimetype, found = s.fileBytes(r.URL.Path)
	}
	s.fetches = append(s.fetches, FileFetch{Path: r.URL.Path, Token: ok, Served: found, Time: time.Now()})
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	switch {
	case !ok:
		http.Redirect(w, r, "/signin?redir="+r.URL.Path, http.StatusFound)
	case failing != "":
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		_, _ = fmt.Fprintf(w, `{"ok":false,"error":%q}`, failing)
	case !found:
		http.NotFound(w, r)
	default:
		w.Header().Set("Content-Type", mimetype)
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data)
	}
}

// fileBytes finds what path names: a file (/files-pri/T-F/name) or a
// thumbnail (/files-tmb/T-F-thumb/size). Called with s.mu held.
func (s *Server) fileBytes(path string) ([]byte, string, bool) {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(parts) < 3 {
		return nil, "", false
	}
	ref := strings.TrimPrefix(parts[1], TeamID+"-")
	switch parts[0] {
	case "files-pri":
		f, ok := s.files[ref]
		return f.file.Data, f.file.Mimetype, ok
	case "files-tmb":
		f, ok := s.files[strings.TrimSuffix(ref, "-thumb")]
		size, err := strconv.Atoi(parts[2])
		if !ok || err != nil || f.file.Thumbs[size] == nil {
			return nil, "", false
		}
		return f.file.Thumbs[size], f.file.Mimetype, true
	}
	return nil, "", false
}

// signin is Slack's sign-in page, where a request for a file without a
// valid token is sent.
func signin(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = fmt.Fprint(w, "<!DOCTYPE html><html><head><title>Sign in | Slack</title></head><body>Sign in to your workspace</body></html>")
}
