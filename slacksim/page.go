package slacksim

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"time"
)

//go:embed static
var static embed.FS

// maxUIRequest is the largest request body the page may send.
const maxUIRequest = 1 << 20

// ssePing is how often an idle event stream gets a comment, so that
// proxies and browsers keep it open.
const ssePing = 20 * time.Second

// PageHandler serves the page and what it calls:
//
//	GET  /            the page, to a browser that opened PageURL (and
//	                  GET /static/… its script and styles, to anyone)
//	GET  /events      server-sent events: "snapshot" (a State) on connect,
//	                  then "message" (a Message, new or updated), "views"
//	                  ({user, views}: a person's modal stack) and "home"
//	                  ({user, view}: a person's Home tab)
//	GET  /ui/state    the State as JSON
//	POST /ui/send     {"user", "text", "thread_ts"?}: Send
//	POST /ui/click    {"user", "ts", "block_id"?, "action_id"}: Click; with
//	                  "home": true, a button of the Home tab: ClickHome
//	POST /ui/home     {"user"}: OpenHome
//	POST /ui/submit   {"user", "view_id", "values": {block: {action: value}}}: Submit
//	POST /ui/close    {"user", "view_id"}: CloseView
//
// The POST endpoints take JSON from the page's own origin only, and
// answer {"ok": true} or {"ok": false, "error": "…"}. Every request must
// name a loopback Host (see IsLoopbackHost); the page is served only with
// the access cookie PageURL leaves (see PageURL); every request but the
// page and its static files must carry the page's token (see PageToken),
// which is only in the page. Others are answered 403.
func (s *Simulator) PageHandler() http.Handler {
	assets, _ := fs.Sub(static, "static") // the directory is embedded
	mux := http.NewServeMux()
	index, _ := fs.ReadFile(assets, "index.html") // embedded
	page := s.pageWithToken(index)
	mux.HandleFunc("GET /{$}", s.page(page))
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w)
		http.FileServerFS(assets).ServeHTTP(w, r)
	})))
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("GET /ui/state", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.State()) })
	mux.Handle("POST /ui/send", s.ui(func(ctx context.Context, r uiRequest) error {
		return s.Send(ctx, r.User, r.Text, r.ThreadTS)
	}))
	mux.Handle("POST /ui/click", s.ui(func(ctx context.Context, r uiRequest) error {
		if r.Home {
			return s.ClickHome(ctx, r.User, r.BlockID, r.ActionID)
		}
		return s.Click(ctx, r.User, r.TS, r.BlockID, r.ActionID)
	}))
	mux.Handle("POST /ui/home", s.ui(func(ctx context.Context, r uiRequest) error {
		return s.OpenHome(ctx, r.User)
	}))
	mux.Handle("POST /ui/submit", s.ui(func(ctx context.Context, r uiRequest) error {
		return s.Submit(ctx, r.User, r.ViewID, r.Values)
	}))
	mux.Handle("POST /ui/close", s.ui(func(ctx context.Context, r uiRequest) error {
		return s.CloseView(ctx, r.User, r.ViewID)
	}))
	return s.guard(mux)
}

// securityHeaders keep the page to its own script and styles: the bot's
// messages carry model and tool output.
func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

// uiRequest is what the page posts.
type uiRequest struct {
	User     string                       `json:"user"`
	Text     string                       `json:"text"`
	ThreadTS string                       `json:"thread_ts"`
	TS       string                       `json:"ts"`
	BlockID  string                       `json:"block_id"`
	ActionID string                       `json:"action_id"`
	ViewID   string                       `json:"view_id"`
	Values   map[string]map[string]string `json:"values"`
	Home     bool                         `json:"home"`
}

// ui adapts an action of the page to HTTP.
func (s *Simulator) ui(act func(ctx context.Context, r uiRequest) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			writeJSON(w, http.StatusUnsupportedMediaType, map[string]any{"ok": false, "error": "send JSON"})
			return
		}
		if !sameOrigin(r) {
			writeJSON(w, http.StatusForbidden, map[string]any{"ok": false, "error": "cross-origin request refused"})
			return
		}
		var req uiRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxUIRequest)).Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "error": "malformed request: " + err.Error()})
			return
		}
		err := act(r.Context(), req)
		status := http.StatusOK
		switch {
		case err == nil:
			writeJSON(w, status, map[string]any{"ok": true})
			return
		case errors.Is(err, ErrNotFound):
			status = http.StatusNotFound
		case errors.Is(err, ErrUnknownUser), errors.Is(err, ErrEmpty):
			status = http.StatusBadRequest
		case errors.Is(err, ErrBot):
			status = http.StatusBadGateway
		default:
			status = http.StatusInternalServerError
		}
		s.log.WithError(err).WithField("path", r.URL.Path).Info("page request refused")
		writeJSON(w, status, map[string]any{"ok": false, "error": err.Error()})
	})
}

// sameOrigin reports whether a request comes from the page itself (or
// from something that is not a browser), not from another site.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// events streams the state to the page.
func (s *Simulator) events(w http.ResponseWriter, r *http.Request) {
	ch, ok := s.subscribe()
	if !ok {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.unsubscribe(ch)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives a server's write timeout
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write([]byte("retry: 1000\n\n")); err != nil {
		return
	}
	ping := time.NewTicker(ssePing)
	defer ping.Stop()
	for {
		var frame []byte
		select {
		case <-r.Context().Done():
			return
		case f, open := <-ch:
			if !open {
				return
			}
			frame = f
		case <-ping.C:
			frame = []byte(": ping\n\n")
		}
		if _, err := w.Write(frame); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
