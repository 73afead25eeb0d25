package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/tools"
)

// listenHint says what to do when BOT_ADDR cannot be listened on: write
// it as an address, when it is not one (a bare port, a URL, a port or
// host that does not exist); else choose another, as when the port is in
// use.
func listenHint(err error) string {
	var addrErr *net.AddrError
	var dnsErr *net.DNSError
	if errors.As(err, &addrErr) || errors.As(err, &dnsErr) {
		return "BOT_ADDR is host:port or :port, e.g. 127.0.0.1:3000, or :3000 for every interface"
	}
	return "set BOT_ADDR to another address, e.g. 127.0.0.1:3001"
}

// shutdownGrace bounds how long running steps get to finish and save on
// SIGINT or SIGTERM.
const shutdownGrace = 30 * time.Second

// The HTTP server's timeouts. Slack sends small bodies and waits at most
// 3 s for an answer, so a request that takes longer to arrive is not
// Slack's, and holding its connection would only cost memory.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 2 * time.Minute
)

// newHTTPServer is the server of serve, with timeouts for every phase of
// a request, so that slow or idle clients cannot hold connections. It
// answers no request of the bot's own tools (refuseOwnTools).
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           refuseOwnTools(h),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
	}
}

// policyInForce names the policy file in force, for a start-up line.
func policyInForce(getenv func(string) string) string {
	if path := getenv("BOT_POLICY"); path != "" {
		return "policy: " + path
	}
	return "no policy: every tool needs approval by anyone"
}

// serve runs the Slack bot: HTTP ingress (or Socket Mode with
// SLACK_APP_TOKEN), the health endpoints, and the schedule that expires
// approvals and recovers cut-off runs.
func serve(ctx context.Context, getenv func(string) string, unknown []bot.UnknownSetting, stderr io.Writer) error {
	log, err := newLogger(getenv, stderr, logrus.InfoLevel)
	if err != nil {
		return err
	}
	logUnknownSettings(log, unknown)
	token, secret, appToken := getenv("SLACK_BOT_TOKEN"), getenv("SLACK_SIGNING_SECRET"), getenv("SLACK_APP_TOKEN")
	if token == "" || (secret == "" && appToken == "") {
		return errors.New("serving Slack needs SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET (or SLACK_APP_TOKEN for Socket Mode); " +
			"for the playground, with Slack simulated, unset SLACK_BOT_TOKEN or run bot playground")
	}
	apiOpts := []slack.Option{}
	if u := getenv("SLACK_API_URL"); u != "" {
		apiOpts = append(apiOpts, slack.OptionAPIURL(u))
	}
	if appToken != "" {
		apiOpts = append(apiOpts, slack.OptionAppLevelToken(appToken))
	}
	// The address first: a port in use is said at once, before Redis and
	// Slack are asked anything, and never after a line saying the bot
	// serves.
	addr := getenv("BOT_ADDR")
	if addr == "" {
		addr = "127.0.0.1:3000"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve: %w (%s)", err, listenHint(err))
	}
	defer ln.Close()
	api := slack.New(token, apiOpts...)

	// The address answers at once, while the bot is wired and, if it does
	// not answer yet, Redis is waited for (started after the bot, or
	// restarting): alive, not ready, and Slack's requests answered as
	// during an outage. Then the bot's own routes take over.
	pending := handlers.New(api, nil, nil, secret, handlers.Options{Logger: log})
	var reason atomic.Pointer[string]
	mux := newHandlerSwitch()
	mux.starting = startingRoutes(mux, pending, &reason)
	httpSrv := newHTTPServer(mux)
	errc := make(chan error, 2)
	go func() { errc <- httpSrv.Serve(ln) }()

	// waitForRedis is called by the wiring's goroutine only, until it
	// sends on wired.
	var waitedSince time.Time
	waitForRedis := func(err error) {
		why := err.Error()
		reason.Store(&why)
		if waitedSince.IsZero() {
			waitedSince = time.Now()
			mux.settle()
			log.WithError(err).Warnf("Redis does not answer: waiting for it, trying again after %s, doubling up to every %s; meanwhile /healthz answers 200, "+
				"/readyz 503, and Slack is asked to try again", bot.RedisRetryFrom, bot.RedisRetryUpTo)
			return
		}
		log.WithError(err).Debug("Redis does not answer yet")
	}
	type wiring struct {
		svc *bot.Bot
		srv *handlers.Server
		err error
	}
	wireCtx, stopWiring := context.WithCancel(ctx)
	defer stopWiring()
	wired := make(chan wiring, 1)
	go func() {
		svc, srv, err := newSlackBot(wireCtx, getenv, log, nil, api, secret, waitForRedis)
		wired <- wiring{svc, srv, err}
	}()
	var w wiring
	done := false
	select {
	case w = <-wired:
		done = true
	case <-ctx.Done():
	case err := <-errc:
		w.err = err
	}
	if w.svc == nil {
		// Stopped, or failed, before the bot was wired: the wiring ends
		// with its context (waiting for Redis does at once).
		stopWiring()
		if !done {
			select {
			case got := <-wired:
				if got.svc != nil {
					got.svc.Close()
				}
			case <-time.After(5 * time.Second):
			}
		}
		if ctx.Err() != nil && !errors.Is(w.err, http.ErrServerClosed) {
			w.err = nil // stopped while starting
		}
		shutCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		_ = httpSrv.Shutdown(shutCtx)
		_ = pending.Shutdown(shutCtx)
		if w.err != nil && !errors.Is(w.err, http.ErrServerClosed) {
			return w.err
		}
		return nil
	}
	svc, srv := w.svc, w.srv
	defer svc.Close()

	mode := "HTTP"
	if appToken != "" {
		mode = "Socket Mode"
	}
	fields := logrus.Fields{"slack": mode, "redis": svc.Redis, "model": svc.Model.Name(), "addr": addr, "policy": getenv("BOT_POLICY")}
	waited := ""
	if !waitedSince.IsZero() {
		d := time.Since(waitedSince).Round(time.Second)
		fields["redis_waited"] = d.String()
		waited = fmt.Sprintf(" (Redis answered after %s)", d)
	}
	bot.WarnCallbackFromAddr(getenv, svc.Policy, log)
	log.WithFields(fields).Infof("Countersign serving Slack (%s) · redis: %s%s · model: %s · %s", mode, svc.Redis, waited, svc.Model.Name(), policyInForce(getenv))

	routed := http.NewServeMux()
	routes(routed, svc, srv, log)
	mux.route(routed)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go svc.Runner.RunSchedule(runCtx, 2*time.Second)
	go srv.RunIntake(runCtx, 2*time.Second)
	if appToken != "" {
		go func() { errc <- srv.RunSocketMode(runCtx, socketmode.New(api)) }()
	}

	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	log.Info("shutting down: no new requests; letting running steps finish (a second signal stops at once)")
	stopRun()
	shutCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	_ = httpSrv.Shutdown(shutCtx)
	_ = pending.Shutdown(shutCtx)
	if err := srv.Shutdown(shutCtx); err != nil {
		log.WithError(err).Warn("shutdown grace ran out; unfinished runs resume from their last checkpoint")
	}
	return nil
}

// startingRoutes are what serve answers until the bot is wired: /healthz
// (the process is alive), /readyz 503 with what start-up waits for
// (reason, once set; never a secret), and Slack's endpoints as during an
// outage; anything else (an OAuth callback, /metrics) is 503. A request
// that comes while the bot is being wired, and Redis has not yet failed
// to answer, is held until it is (for at most startHold, within Slack's
// 3 s), and then served by the bot, as it would have been had it waited
// in the listener's queue.
func startingRoutes(sw *handlerSwitch, pending *handlers.Server, reason *atomic.Pointer[string]) http.Handler {
	unavailable := pending.Unavailable()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(startHold)
		defer t.Stop()
		select {
		case <-sw.settled:
		case <-t.C:
		case <-r.Context().Done():
			return
		}
		if h := sw.routed.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/slack/") {
			unavailable.ServeHTTP(w, r)
			return
		}
		http.Error(w, "not ready: starting", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		why := "starting"
		if r := reason.Load(); r != nil {
			why = "waiting for Redis: " + *r
		}
		http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
	})
	return mux
}

// startHold is how long a Slack request may wait for the bot being
// wired, before it is answered as during an outage.
const startHold = 2 * time.Second

// healthz says the process is alive, ready or not.
func healthz(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }

// handlerSwitch serves the start-up routes (starting) until the bot's
// are set (route). settled is closed once start-up either has the bot's
// routes or waits for Redis.
type handlerSwitch struct {
	starting http.Handler
	routed   atomic.Pointer[http.Handler]
	settled  chan struct{}
	once     sync.Once
}

func newHandlerSwitch() *handlerSwitch { return &handlerSwitch{settled: make(chan struct{})} }

// route makes h serve every request from now on.
func (s *handlerSwitch) route(h http.Handler) {
	s.routed.Store(&h)
	s.settle()
}

// settle releases the requests held while the bot is wired.
func (s *handlerSwitch) settle() { s.once.Do(func() { close(s.settled) }) }

func (s *handlerSwitch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := s.routed.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	s.starting.ServeHTTP(w, r)
}

// refuseOwnTools answers 403 to a request sent by the bot's own
// http_request tool (it carries tools.ToolHeader), whatever name or
// address of the bot's it was sent to: a call the model asked for never
// reaches the bot's endpoints — in the playground, the page that acts for
// every person — nor learns what they say.
func refuseOwnTools(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Header[tools.ToolHeader]; ok {
			http.Error(w, "This is Countersign itself: its own tools may not call it.", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
