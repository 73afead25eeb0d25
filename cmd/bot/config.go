package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/metrics"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// newLogger builds the logger from LOG_LEVEL and LOG_FORMAT.
func newLogger(getenv func(string) string, out io.Writer, defaultLevel logrus.Level) (*logrus.Logger, error) {
	log := logrus.New()
	log.Out = out
	log.Level = defaultLevel
	if s := getenv("LOG_LEVEL"); s != "" {
		lvl, err := logrus.ParseLevel(s)
		if err != nil {
			return nil, fmt.Errorf("LOG_LEVEL: %w", err)
		}
		log.Level = lvl
	}
	switch f := getenv("LOG_FORMAT"); f {
	case "json":
		log.Formatter = &logrus.JSONFormatter{}
	case "", "text":
		log.Formatter = &logrus.TextFormatter{FullTimestamp: true}
	default:
		return nil, fmt.Errorf("LOG_FORMAT %q: want json or text", f)
	}
	return log, nil
}

// redisPoolSize is the connection pool when REDIS_URL sets none
// (?pool_size=): room for every background job the handlers run at once
// (16 per CPU) and the requests being acknowledged beside them, which
// must not wait for a connection.
var redisPoolSize = 24 * runtime.GOMAXPROCS(0)

// connectRedis connects to REDIS_URL (a cluster if REDIS_CLUSTER=true) or,
// when it is unset, starts an embedded Redis. It returns the client, a
// description for the start-up line, and a function that closes both.
// hooks are added to the client before its first command (on a cluster,
// to every node's client), so that they see every command the bot sends.
func connectRedis(ctx context.Context, getenv func(string) string, log logrus.FieldLogger, hooks ...redis.Hook) (redis.UniversalClient, string, func(), error) {
	raw := getenv("REDIS_URL")
	if raw == "" {
		m := miniredis.NewMiniRedis()
		password := embeddedRedisPassword()
		m.RequireAuth(password)
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, "", nil, fmt.Errorf("start embedded redis: %w", err)
		}
		// The embedded server does not expire keys by itself; move its
		// clock along so leases and TTLs behave.
		stop := make(chan struct{})
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					m.FastForward(time.Second)
				}
			}
		}()
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), Password: password})
		for _, h := range hooks {
			rdb.AddHook(h)
		}
		log.Warn("REDIS_URL is not set: using an embedded in-process Redis; all threads are lost when the bot exits. " +
			"Set REDIS_URL=redis://host:6379/0 to keep them.")
		closeAll := func() { _ = rdb.Close(); close(stop); m.Close() }
		return rdb, "embedded (in-process, data lost on exit)", closeAll, nil
	}
	// go-redis logs (reconnects, pool trouble) through the bot's logger,
	// so that with LOG_FORMAT=json every line is JSON.
	redis.SetLogger(redisLogger{log})
	// A parse error quotes the URL, password and all.
	var secrets tools.Secrets
	secrets.AddURL(raw, nil)
	var rdb redis.UniversalClient
	if strings.EqualFold(getenv("REDIS_CLUSTER"), "true") {
		opts, err := redis.ParseClusterURL(raw)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL (cluster): %w", secrets.RedactError(err))
		}
		if opts.PoolSize == 0 {
			opts.PoolSize = redisPoolSize
		}
		cc := redis.NewClusterClient(opts)
		cc.OnNewNode(func(node *redis.Client) {
			for _, h := range hooks {
				node.AddHook(h)
			}
		})
		rdb = cc
	} else {
		opts, err := redis.ParseURL(raw)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL: %w", secrets.RedactError(err))
		}
		if opts.PoolSize == 0 {
			opts.PoolSize = redisPoolSize
		}
		c := redis.NewClient(opts)
		for _, h := range hooks {
			c.AddHook(h)
		}
		rdb = c
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		_ = rdb.Close()
		return nil, "", nil, fmt.Errorf("connect to redis at %s: %w", secrets.Redact(raw), secrets.RedactError(err))
	}
	return rdb, secrets.Redact(raw), func() { _ = rdb.Close() }, nil
}

// waitReplicas is how many Redis replicas must acknowledge the writes that
// gate a side effect: REDIS_WAIT_REPLICAS if set, else 1 when the server —
// on a cluster, every master — has a replica connected, else 0.
func waitReplicas(ctx context.Context, getenv func(string) string, rdb redis.UniversalClient) (int, error) {
	if v := getenv("REDIS_WAIT_REPLICAS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("REDIS_WAIT_REPLICAS=%q: want a whole number of replicas, 0 or more", v)
		}
		return n, nil
	}
	switch c := rdb.(type) {
	case *redis.Client:
		return min(connectedReplicas(ctx, c), 1), nil
	case *redis.ClusterClient:
		var mu sync.Mutex
		least := -1
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			n := connectedReplicas(ctx, m)
			mu.Lock()
			if least < 0 || n < least {
				least = n
			}
			mu.Unlock()
			return nil
		})
		if err != nil || least <= 0 {
			return 0, nil
		}
		return 1, nil
	}
	return 0, nil
}

// connectedReplicas is how many replicas the server reports connected; 0
// when it hides INFO (the embedded Redis, some managed services).
func connectedReplicas(ctx context.Context, c *redis.Client) int {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// auditRetention is how long audit entries are kept: AUDIT_RETENTION (a
// Go duration, or whole days: 90d), default 90 days.
func auditRetention(getenv func(string) string) (time.Duration, error) {
	v := getenv("AUDIT_RETENTION")
	if v == "" {
		return redisstore.DefaultAuditRetention, nil
	}
	d, err := tools.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("AUDIT_RETENTION: %w", err)
	}
	return d, nil
}

// redisLogger is go-redis's logger on logrus.
type redisLogger struct{ log logrus.FieldLogger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.WithField("component", "redis").Warnf(format, v...)
}

// newToolbox builds the agent's tools from BOT_POLICY (or the defaults):
// the built-in tools and those of the policy's MCP servers, which start
// when the tools are first needed.
func newToolbox(getenv func(string) string, log logrus.FieldLogger) (*mcp.Manager, *tools.Policy, error) {
	policy := tools.DefaultPolicy()
	if path := getenv("BOT_POLICY"); path != "" {
		p, err := tools.LoadPolicy(path)
		if err != nil {
			return nil, nil, err
		}
		policy = p
	}
	box, err := mcp.New(policy, tools.Builtins(policy, nil), mcp.Options{Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return box, policy, nil
}

// service is the bot without a front end: the model, the tools and
// their policy, Redis, the agent, the runner and the metrics.
type service struct {
	runner *runner.Service
	store  *redisstore.Store
	// checkpoints is the checkpoint store the agent was given: store,
	// instrumented by metrics.
	checkpoints graph.Store
	metrics     *metrics.Metrics
	model       llm.Model
	policy      *tools.Policy
	tools       *mcp.Manager
	redis       string
	close       func()
}

// newService wires a service from the environment. model, if nil, comes
// from the LLM_* variables; newReporter builds the front end's reporter
// once the store exists.
func newService(ctx context.Context, getenv func(string) string, log logrus.FieldLogger, model llm.Model,
	groups runner.Groups, newReporter func(*redisstore.Store) runner.Reporter) (*service, error) {
	if model == nil {
		var err error
		if model, err = llm.FromEnvWithLogger(getenv, log); err != nil {
			return nil, err
		}
	}
	box, policy, err := newToolbox(getenv, log)
	if err != nil {
		return nil, err
	}
	cost := metrics.NewRedisCost(redisstore.Operation, redisstore.Operations...)
	rdb, desc, closeRedis, err := connectRedis(ctx, getenv, log, cost)
	if err != nil {
		_ = box.Close()
		return nil, err
	}
	warnOpenRedis(ctx, getenv, policy, log)
	replicas, err := waitReplicas(ctx, getenv, rdb)
	if err != nil {
		closeRedis()
		return nil, err
	}
	if replicas > 0 {
		log.WithField("replicas", replicas).Info("saves and claims wait for Redis replicas to acknowledge them")
	}
	retention, err := auditRetention(getenv)
	if err != nil {
		closeRedis()
		_ = box.Close()
		return nil, err
	}
	store := redisstore.New(rdb, redisstore.Options{Replicas: replicas, AuditRetention: retention})
	ver, rev, gov := buildVersion()
	var toolNames []string
	for _, t := range box.FixedTools() { // MCP servers' tools come and go

		toolNames = append(toolNames, t.Name())
	}
	obs := metrics.New(store.WaitingTotal, metrics.Options{Version: ver, Revision: rev, GoVersion: gov, Tools: toolNames, Redis: cost})
	var svc *runner.Service
	rep := newReporter(store)
	onStream, err := streaming(getenv, rep, &svc)
	if err != nil {
		closeRedis()
		_ = box.Close()
		return nil, err
	}
	checkpoints := obs.InstrumentStore(store)
	a, err := agent.New(model, box, checkpoints, agent.Options{
		Logger:          log,
		MaxCallsPerTurn: policy.CallsPerTurn(),
		ToolTimeout:     box.ToolTimeout(2 * time.Minute),
		OnModel:         obs.ModelCalled,
		OnCall:          func(ctx context.Context, s *agent.State, c agent.Call) { svc.OnCall(ctx, s, c) },
		BeforeCall:      func(ctx context.Context, s *agent.State, c agent.Call) error { return svc.BeforeCall(ctx, s, c) },
		OnStream:        onStream,
	})
	if err != nil {
		closeRedis()
		_ = box.Close()
		return nil, err
	}
	// The Slack lookup of user groups tells channel members too, for
	// decisions from the Home tab.
	members, _ := groups.(runner.Members)
	svc = runner.New(a, store, rep, runner.Options{
		Logger: log, Schedule: store, Auditor: store, Observer: obs, Groups: groups,
		Inbox: store, Members: members,
	})
	closeAll := func() { _ = box.Close(); closeRedis() }
	return &service{runner: svc, store: store, checkpoints: checkpoints, metrics: obs, model: model, policy: policy, tools: box, redis: desc, close: closeAll}, nil
}

// newSlackBot wires a service that reports to Slack through api, and the
// handlers that answer Slack's requests signed with secret.
func newSlackBot(ctx context.Context, getenv func(string) string, log logrus.FieldLogger, model llm.Model,
	api *slack.Client, secret string) (*service, *handlers.Server, error) {
	auth, err := api.AuthTestContext(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("slack auth.test: %w", err)
	}
	var rep *handlers.Reporter
	groups := handlers.NewGroups(api, 0, nil)
	svc, err := newService(ctx, getenv, log, model, groups, func(store *redisstore.Store) runner.Reporter {
		rep = handlers.NewReporter(api, store, nil, log).WithGroups(groups)
		return rep
	})
	if err != nil {
		return nil, nil, err
	}
	rep.WithTools(svc.tools) // before anything runs
	svc.tools.SetElicitor(handlers.NewElicitor(api, svc.store, svc.store, log))
	srv := handlers.New(api, svc.runner, svc.store, secret, handlers.Options{BotUserID: auth.UserID, Logger: log, Mailbox: svc.store,
		Home: svc.store, TeamURL: auth.URL})
	rep.WithHome(srv.Home())
	return svc, srv, nil
}

// routes adds what every server of the bot serves: the Slack endpoints
// (timed, for the acknowledgement histogram), health, readiness and
// metrics.
func (s *service) routes(mux *http.ServeMux, slack *handlers.Server) {
	mux.Handle("/slack/", s.metrics.Instrument(slack.Handler()))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.store.Ping(ctx); err != nil {
			http.Error(w, "redis unreachable", http.StatusServiceUnavailable)
			return
		}
		// A server that is down costs its tools, not readiness: its
		// state is a detail below. So does a tool the model is not
		// offered.
		fmt.Fprint(w, "ready\n"+s.tools.Describe())
		for _, l := range leftOut(s.model, s.tools.Tools()) {
			fmt.Fprintf(w, "tool left out: %s\n", l)
		}
	})
	mux.Handle("GET /metrics", s.metrics.Handler())
}
