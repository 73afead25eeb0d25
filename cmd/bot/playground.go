package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/slacksim"
)

// playground serves the bot with a simulated Slack: a web page on
// BOT_ADDR that looks like a Slack channel, a Slack Web API for the bot's
// client, and the real /slack/* handlers, which the simulator sends
// signed requests to, as Slack would. Redis and the model come from the
// environment as for serve (embedded Redis and the demo model when
// nothing is set); Slack credentials are not used — the simulator is
// Slack, with a signing secret and a token made up for the run. The page
// opens only from the URL printed on stdout, with a random token made for
// the run (a new one each start: a restarted bot does not honour a URL
// that a process may have read from an old terminal or log).
func playground(ctx context.Context, getenv func(string) string, unknown []bot.UnknownSetting, stdout, stderr io.Writer) error {
	log, err := newLogger(getenv, stderr, logrus.InfoLevel)
	if err != nil {
		return err
	}
	logUnknownSettings(log, unknown)
	model, err := llm.FromEnv(getenv)
	if err != nil {
		return err
	}
	addr := getenv("BOT_ADDR")
	if addr == "" {
		addr = "127.0.0.1:3000"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("playground: %w (%s)", err, listenHint(err))
	}
	defer ln.Close()
	base := loopbackURL(ln.Addr())

	secret, token := randomHex(32), "xoxb-playground-"+randomHex(12)
	hint := ""
	if _, demo := model.(*llm.Demo); demo {
		hint = "ask it to fetch a URL, or to use a tool by name (an MCP tool: \"use <server>__<tool> …\"), to see an approval"
	}
	sim := slacksim.New(slacksim.Options{
		BotURL: base, SigningSecret: secret, BotToken: token,
		Model: model.Name(), Hint: hint, Logger: log.WithField("component", "slack-simulator"),
	})
	// The simulator's Web API answers first: the bot asks it who it is.
	mux := http.NewServeMux()
	mux.Handle("/api/", sim.APIHandler())
	// No read or write timeout: the page's event stream stays open, and a
	// read deadline would end it.
	httpSrv := &http.Server{Handler: refuseOwnTools(mux), ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout}
	httpSrv.RegisterOnShutdown(sim.Close)
	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(ln) }()
	defer httpSrv.Close()
	api := slack.New(token, slack.OptionAPIURL(base+"/api/"))
	svc, srv, err := newSlackBot(ctx, playgroundEnv(getenv), log, model, api, secret, nil)
	if err != nil {
		return fmt.Errorf("playground: %w", err)
	}
	defer svc.Close()
	routes(mux, svc, srv, log)
	mux.Handle("/", sim.PageHandler())

	// The page's URL carries its access token: whoever has it can act as
	// anyone in the playground. It goes on the terminal line the person
	// who started the bot reads, as Jupyter prints its token, and never
	// into the structured log, which may be shipped elsewhere.
	log.WithFields(logrus.Fields{"slack": "playground", "redis": svc.Redis, "model": model.Name(), "addr": ln.Addr().String(), "url": base + "/", "policy": getenv("BOT_POLICY")}).
		Infof("Countersign playground (Slack simulated in this process) · redis: %s · model: %s · %s · open the URL printed below, token included, in a browser", svc.Redis, model.Name(), policyInForce(getenv))
	fmt.Fprintf(stdout, "Countersign playground: open %s in a browser.\n", sim.PageURL(base))

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go svc.Runner.RunSchedule(runCtx, 2*time.Second)
	go srv.RunIntake(runCtx, 2*time.Second)
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	log.Info("shutting down: letting running steps finish (a second signal stops at once)")
	stopRun()
	shutCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	// Running steps still post to the simulator, so the server stays up
	// until they are done; the page's streams end first.
	sim.Close()
	if err := srv.Shutdown(shutCtx); err != nil {
		log.WithError(err).Warn("shutdown grace ran out; unfinished runs resume from their last checkpoint")
	}
	_ = httpSrv.Shutdown(shutCtx)
	return nil
}

// loopbackURL is the http:// URL of a listening address, through loopback
// when it listens on all interfaces.
func loopbackURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	host := tcp.IP.String()
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

// playgroundEnv is the environment with the playground's defaults: the
// simulator has no rate limits, so a streamed answer is redrawn every
// 100ms unless SLACK_STREAM_INTERVAL says otherwise.
func playgroundEnv(getenv func(string) string) func(string) string {
	return func(key string) string {
		if v := getenv(key); v != "" || key != "SLACK_STREAM_INTERVAL" {
			return v
		}
		return "100ms"
	}
}
