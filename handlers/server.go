package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackfiles"
	"github.com/countersign/countersign/slacksig"
)

// Options are the server's optional settings.
type Options struct {
	// Now is the clock (default time.Now); verification uses it too.
	Now func() time.Time
	// BotUserID is the bot's own Slack user ID (from auth.test), to
	// recognise mentions of it and its own messages.
	BotUserID string
	// MaxConcurrentWork bounds background jobs (runs, resumes) running at
	// once; more wait their turn. Default 16 per CPU.
	MaxConcurrentWork int
	// Logger defaults to a logger that discards.
	Logger logrus.FieldLogger
	// Mailbox, if set, carries people's answers to tools' requests for
	// input (see Elicitor) to the process whose call waits for them.
	Mailbox Mailbox
	// Home, if set, turns on the Home tab (home.go), keeping who has
	// opened it; the runner must keep an inbox (runner.Options.Inbox).
	Home HomeStore
	// TeamURL is the workspace's URL (auth.test's url), for links to
	// threads in the Home tab.
	TeamURL string
	// Connections, if set with Home, lists people's own MCP connections
	// in their Home tab, to revoke or make (homeconn.go).
	Connections Connections
	// Membership, if set, takes the events that say a user group's or a
	// channel's members changed (membership.go); without it they are
	// acknowledged and ignored.
	Membership MembershipChanges
	// Files, if set, downloads the images people attach to their
	// requests, for the model (a *slackfiles.Fetcher); without it, as
	// with LLM_IMAGES=off, attached files are named to the model and
	// nothing is downloaded.
	Files Files
}

// Files reads the files attached to a request: a line of text for each,
// and the images among them that the model may be shown. It must be safe
// for concurrent use.
type Files interface {
	Read(ctx context.Context, files []slackfiles.File) (lines []string, images []llm.Image)
}

// Server answers Slack. Create it with New; serve Handler.
//
// Concurrency. Handler's endpoints are called by net/http's goroutines,
// any number at once, and by RunSocketMode's reader goroutine, one
// envelope after another; they must not block: each verifies, parses,
// does what must precede the answer (store the request, runner.Decide, a
// modal: at most about a second, modal.go) and answers. The rest runs in
// background jobs (at most Options.MaxConcurrentWork at once, unordered,
// on a context that outlives the request); runs of one thread are kept
// apart by the runner's lease. A handler whose decision was claimed
// starts the runner.Drive that uses the lease the claim may have taken.
// RunIntake and RunSocketMode run on the caller's goroutine until their
// context ends; Shutdown, once the listeners stop, waits for the jobs.
type Server struct {
	api      *slack.Client
	svc      *runner.Service
	store    Store
	verifier *slacksig.Verifier
	opts     Options
	log      logrus.FieldLogger
	work     sync.WaitGroup
	busy     atomic.Int64 // background jobs queued or running
	// slots bounds the background jobs running at once, so that a burst
	// of requests queues work instead of starving acknowledgements of
	// CPU and Redis connections.
	slots chan struct{}
	// quit is closed when Shutdown begins: work that would try again
	// later (carryOn) leaves it to the intake instead.
	quit     chan struct{}
	quitOnce sync.Once
	home     *Home // nil without Options.Home
	// held are the intake's requests this process's attempts hold
	// (intake.go).
	held heldRequests
}

// New returns a server. signingSecret verifies requests. Who may decide
// what is the runner's to say, not the server's.
func New(api *slack.Client, svc *runner.Service, store Store, signingSecret string, opts Options) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.Out = io.Discard
		opts.Logger = l
	}
	if opts.MaxConcurrentWork <= 0 {
		opts.MaxConcurrentWork = 16 * runtime.GOMAXPROCS(0)
	}
	s := &Server{
		slots: make(chan struct{}, opts.MaxConcurrentWork),
		quit:  make(chan struct{}),
		api:   api, svc: svc, store: store,
		verifier: slacksig.NewVerifier(signingSecret, opts.Now),
		opts:     opts,
		log:      opts.Logger,
	}
	if opts.Home != nil {
		s.home = &Home{api: api, svc: svc, store: store, openers: opts.Home, teamURL: opts.TeamURL, now: opts.Now,
			log: opts.Logger.WithField("component", "home"), conns: opts.Connections}
	}
	if svc != nil {
		svc.SetKeptCarrier(s.carryKept)
	}
	return s
}

// Home returns the Home tab's publisher (nil without Options.Home), for
// the Reporter (see Reporter.WithHome).
func (s *Server) Home() *Home { return s.home }

// Handler routes the Slack endpoints. Each verifies the request's
// signature on the raw body before parsing anything.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /slack/commands", s.verifier.Middleware(s.command))
	mux.Handle("POST /slack/events", s.verifier.Middleware(s.event))
	mux.Handle("POST /slack/interactions", s.verifier.Middleware(s.interaction))
	return mux
}

// background runs fn after the request is answered, on a context that
// survives the request; Shutdown waits for it.
func (s *Server) background(ctx context.Context, fn func(ctx context.Context)) {
	s.spawn(ctx, func(ctx context.Context) {
		s.slots <- struct{}{}
		defer func() { <-s.slots }()
		fn(ctx)
	})
}

// spawn runs fn on a goroutine of its own, on a context that survives
// the request; Shutdown waits for it. It takes no slot: its callers do.
func (s *Server) spawn(ctx context.Context, fn func(ctx context.Context)) {
	ctx = context.WithoutCancel(ctx)
	s.work.Add(1)
	s.busy.Add(1)
	go func() {
		defer s.work.Done()
		defer s.busy.Add(-1)
		fn(ctx)
	}()
}

// Resume drives thread in the background, tracked like the work after a
// click (Shutdown waits for it): for a thread woken from outside Slack,
// such as by an OAuth callback.
func (s *Server) Resume(ctx context.Context, thread string) { s.drive(ctx, thread) }

// Busy is how many background jobs (runs, resumes, answers to clicks)
// are queued or running. A job is counted before its request is
// answered, so 0 once every answer is out means all that was
// acknowledged is done: the bot is quiet. Safe for concurrent use.
func (s *Server) Busy() int { return int(s.busy.Load()) }

// Shutdown waits for background work to finish, or for ctx to end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.quitOnce.Do(func() { close(s.quit) })
	done := make(chan struct{})
	go func() { s.work.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ephemeral tells user something only they see, in channel (and thread).
func (s *Server) ephemeral(ctx context.Context, channel, threadTS, user, text string) {
	s.tell(ctx, channel, threadTS, user, "", text)
}

// tell is ephemeral with a fallback: where the bot cannot post (it is not
// in the channel), the request's response_url still reaches the person.
func (s *Server) tell(ctx context.Context, channel, threadTS, user, responseURL, text string) {
	opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
	if threadTS != "" {
		opts = append(opts, slack.MsgOptionTS(threadTS))
	}
	_, err := s.api.PostEphemeralContext(ctx, channel, user, opts...)
	if err == nil {
		return
	}
	log := s.log.WithFields(logrus.Fields{"channel": channel, "user": user})
	if responseURL == "" {
		log.WithError(err).Warn("posting an ephemeral message")
		return
	}
	if rerr := respond(ctx, responseURL, text); rerr != nil {
		log.WithError(errors.Join(err, rerr)).Warn("posting an ephemeral message, also through response_url")
	}
}

// respond posts an ephemeral message to a response_url.
func respond(ctx context.Context, responseURL, text string) error {
	u, err := url.Parse(responseURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("response_url %q is not an http(s) URL", responseURL)
	}
	body, _ := json.Marshal(map[string]string{"response_type": "ephemeral", "text": text})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("response_url answered %s", resp.Status)
	}
	return nil
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
