package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/elicit"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/internal/logtext"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackdir"
	"github.com/countersign/countersign/slackfiles"
)

// newLogger builds the logger from LOG_LEVEL and LOG_FORMAT.
func newLogger(getenv func(string) string, out io.Writer, defaultLevel logrus.Level) (*logrus.Logger, error) {
	log := logrus.New()
	log.Out = out
	log.Level = defaultLevel
	if s := getenv("LOG_LEVEL"); s != "" {
		lvl, err := logrus.ParseLevel(s)
		if err != nil {
			return nil, fmt.Errorf("LOG_LEVEL %q: want trace, debug, info, warn, error, fatal or panic", s)
		}
		log.Level = lvl
	}
	switch f := getenv("LOG_FORMAT"); f {
	case "json":
		log.Formatter = &logrus.JSONFormatter{}
	case "", "text":
		// logrus's TextFormatter's lines (FullTimestamp), written
		// without most of its allocations.
		log.Formatter = logtext.New()
	default:
		return nil, fmt.Errorf("LOG_FORMAT %q: want json or text", f)
	}
	return log, nil
}

// newService wires the bot without a front end (bot.New) from the
// environment, for this build. model, if nil, comes from the LLM_*
// variables; newReporter builds the front end's reporter once the store
// exists.
func newService(ctx context.Context, getenv func(string) string, log logrus.FieldLogger, model llm.Model,
	groups runner.Groups, newReporter func(*redisstore.Store) runner.Reporter) (*bot.Bot, error) {
	return newStreamingService(ctx, getenv, log, model, groups, false, nil, newReporter)
}

// newStreamingService is newService for a front end that shows answers as
// they are written if stream is set; with waitForRedis set, it waits for
// a REDIS_URL that does not answer yet (bot.Options.WaitForRedis).
func newStreamingService(ctx context.Context, getenv func(string) string, log logrus.FieldLogger, model llm.Model,
	groups runner.Groups, stream bool, waitForRedis func(error), newReporter func(*redisstore.Store) runner.Reporter) (*bot.Bot, error) {
	ver, rev, gov := buildVersion()
	return bot.New(ctx, getenv, log, newReporter, bot.Options{
		Model: model, Groups: groups, Stream: stream, Version: ver, Revision: rev, GoVersion: gov, WaitForRedis: waitForRedis,
	})
}

// newSlackBot wires a bot that reports to Slack through api, and the
// handlers that answer Slack's requests signed with secret. With
// waitForRedis set, it waits for a REDIS_URL that does not answer yet.
func newSlackBot(ctx context.Context, getenv func(string) string, log logrus.FieldLogger, model llm.Model,
	api *slack.Client, secret string, waitForRedis func(error)) (*bot.Bot, *handlers.Server, error) {
	auth, err := api.AuthTestContext(ctx)
	if err != nil {
		return nil, nil, authTestError(err)
	}
	stream, streamed, err := streaming(getenv)
	if err != nil {
		return nil, nil, err
	}
	var rep *handlers.Reporter
	groups := slackdir.NewGroups(api, 0, nil)
	svc, err := newStreamingService(ctx, getenv, log, model, groups, streamed, waitForRedis, func(store *redisstore.Store) runner.Reporter {
		// A change of a group's or channel's members that Slack told
		// any replica of makes every replica ask Slack again before that
		// membership decides a call.
		groups.SetMarks(store)
		rep = handlers.NewReporter(api, store, nil, log).WithGroups(groups).WithBotID(auth.BotID)
		if streamed {
			rep.SetStreaming(stream)
		}
		return rep
	})
	if err != nil {
		return nil, nil, err
	}
	rep.WithTools(svc.Tools) // before anything runs
	el := elicit.New(api, svc.Store, svc.Store, log)
	svc.Tools.SetElicitor(el) // requests made during a call
	svc.Runner.SetAsker(el)   // input requests that pause the run
	svc.Tools.SetProgressReporter(rep.Progress())
	svc.Tools.SetPrompter(elicit.NewConnectPrompter(api, log))
	// The images people attach are downloaded only for a model that is
	// shown images (LLM_IMAGES), with the bot token, from Slack's file
	// host only. (The playground's simulated Slack serves no files.)
	var files handlers.Files
	if svc.Images && getenv("SLACK_BOT_TOKEN") != "" {
		f, err := slackfiles.New(getenv("SLACK_BOT_TOKEN"), slackfiles.Options{APIURL: getenv("SLACK_API_URL"), Logger: log})
		if err != nil {
			svc.Close()
			return nil, nil, err
		}
		files = f
	}
	srv := handlers.New(api, svc.Runner, svc.Store, secret, handlers.Options{BotUserID: auth.UserID, Logger: log, Mailbox: svc.Store,
		Home: svc.Store, TeamURL: auth.URL, Connections: svc.Connections(), Membership: groups, Files: files})
	rep.WithHome(srv.Home())
	// A call that waited for its requester to connect goes on, on the
	// replica that takes the callback.
	svc.Auth.SetWaker(mcpauth.WakerFunc(func(ctx context.Context, w mcpauth.Waiting) error {
		err := svc.Runner.Connected(ctx, runner.Connection{Thread: w.Thread, Call: w.Call, Round: w.Round, Server: w.Identity.Server, User: w.Identity.User})
		if err == nil {
			srv.Resume(ctx, w.Thread)
		}
		return err
	}))
	return svc, srv, nil
}

// authTestError says what a failed auth.test, the bot's first call to
// Slack, means for its configuration: a token Slack refuses names
// SLACK_BOT_TOKEN and where to find the right one; a Web API the bot
// cannot reach names what decides where it is.
func authTestError(err error) error {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		switch se.Err {
		case "invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive", "not_allowed_token_type":
			return fmt.Errorf("slack auth.test: Slack refused SLACK_BOT_TOKEN (%w): use the app's Bot User OAuth Token (xoxb-…, "+
				"under OAuth & Permissions), and reinstall the app if it was revoked", err)
		}
	}
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return fmt.Errorf("slack auth.test: %w (the bot cannot reach Slack's Web API: check the network and any proxy "+
			"(HTTPS_PROXY), and SLACK_API_URL if it is set)", err)
	}
	return fmt.Errorf("slack auth.test: %w", err)
}

// routes adds what every server of the bot serves: the Slack endpoints
// (timed, for the acknowledgement histogram), health, readiness and
// metrics.
func routes(mux *http.ServeMux, b *bot.Bot, slack *handlers.Server, log logrus.FieldLogger) {
	mux.Handle("/slack/", b.Metrics.Instrument(slack.Handler()))
	mux.Handle("GET "+bot.CallbackPath, b.Auth.Callback(log))
	b.Metrics.Background(slack.Busy)
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := b.Store.Ping(ctx); err != nil {
			http.Error(w, "redis unreachable", http.StatusServiceUnavailable)
			return
		}
		// A server that is down costs its tools, not readiness: its
		// state is a detail below. So does a tool the model is not
		// offered.
		fmt.Fprint(w, "ready\n"+b.Tools.Describe())
		for _, l := range leftOut(b.Model, b.Tools.Tools()) {
			fmt.Fprintf(w, "tool left out: %s\n", l)
		}
	})
	mux.Handle("GET /metrics", b.Metrics.Handler())
}
