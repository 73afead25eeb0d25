package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

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
// a request, so that slow or idle clients cannot hold connections.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
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
func serve(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	log, err := newLogger(getenv, stderr, logrus.InfoLevel)
	if err != nil {
		return err
	}
	token, secret, appToken := getenv("SLACK_BOT_TOKEN"), getenv("SLACK_SIGNING_SECRET"), getenv("SLACK_APP_TOKEN")
	if token == "" || (secret == "" && appToken == "") {
		return errors.New("serving Slack needs SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET (or SLACK_APP_TOKEN for Socket Mode)")
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
		return fmt.Errorf("serve: %w (set BOT_ADDR to another address, e.g. 127.0.0.1:3001)", err)
	}
	defer ln.Close()
	api := slack.New(token, apiOpts...)
	svc, srv, err := newSlackBot(ctx, getenv, log, nil, api, secret)
	if err != nil {
		return err
	}
	defer svc.Close()

	mode := "HTTP"
	if appToken != "" {
		mode = "Socket Mode"
	}
	log.WithFields(logrus.Fields{"slack": mode, "redis": svc.Redis, "model": svc.Model.Name(), "addr": addr, "policy": getenv("BOT_POLICY")}).
		Infof("Countersign serving Slack (%s) · redis: %s · model: %s · %s", mode, svc.Redis, svc.Model.Name(), policyInForce(getenv))

	mux := http.NewServeMux()
	routes(mux, svc, srv, log)
	httpSrv := newHTTPServer(mux)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	errc := make(chan error, 2)
	go func() { errc <- httpSrv.Serve(ln) }()
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
	if err := srv.Shutdown(shutCtx); err != nil {
		log.WithError(err).Warn("shutdown grace ran out; unfinished runs resume from their last checkpoint")
	}
	return nil
}
