// Package bot is the wiring: the one constructor of the bot without a
// front end. New builds, from the environment (docs/architecture.md,
// Contracts), the model, the tools and their policy, the Redis client
// and store, the agent, the runner and the metrics, and connects them
// the one way the bot runs them — the metrics' Redis-cost hook on the
// client before its first command, the instrumented checkpoint store
// under the agent, the runner as the agent's runner, the front end's
// reporter under the runner. The
// binary (serve, the playground, bot chat, the operator commands), the
// tests and the benchmarks all call New, so that what they run and
// measure is what the bot runs.
//
// It owns no front end: it serves no HTTP, speaks no Slack and reads no
// flags; the front end passes its reporter (and says whether it shows
// answers as they are written), and cmd/bot parses the command line and
// routes requests. Neither does it decide anything: the rules are the
// runner's, the storage redisstore's.
package bot

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/metrics"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// Bot is the bot without a front end.
//
// Concurrency. New and Close are called once each, by the goroutine that
// owns the bot (cmd/bot's serve, playground or chat, a test, a benchmark);
// Close must come after the front end and the schedule have stopped using
// it. In between, the fields are set and not changed, and what they hold
// is safe for concurrent use (each type says how): front ends call Runner
// from their request goroutines, the owner runs Runner.RunSchedule on a
// goroutine of its own, the agent calls Tools from the threads' goroutines.
// New starts goroutines only for the embedded Redis (its clock) when no
// REDIS_URL is set; the MCP servers start when the tools are first
// needed (mcp.Manager); Close stops both and closes Redis.
type Bot struct {
	// Runner is the conversation service: the only door to the bot.
	Runner *runner.Service
	// Store is everything kept in Redis.
	Store *redisstore.Store
	// Checkpoints is the checkpoint store the agent was given: Store,
	// instrumented by Metrics.
	Checkpoints graph.Store
	// Metrics are the bot's Prometheus metrics, its Redis cost included.
	Metrics *metrics.Metrics
	// RedisCost counts what the bot's Redis client sends and receives.
	RedisCost *metrics.RedisCost
	Model     llm.Model
	// Images says the model is shown images (LLM_IMAGES, on by
	// default): without them, no image is fetched or kept.
	Images bool
	Policy *tools.Policy
	Tools  *mcp.Manager
	// Auth keeps the MCP servers' OAuth connections.
	Auth *mcpauth.Broker
	// Redis describes the Redis in use, for the start-up line (its
	// password redacted).
	Redis string

	close func()
}

// Options are New's optional settings.
type Options struct {
	// Model, if set, is the model; else it comes from the LLM_*
	// variables.
	Model llm.Model
	// Policy, if set, is the tool policy; else BOT_POLICY's, or the
	// defaults.
	Policy *tools.Policy
	// Tools, if set, take the place of the built-in tools (benchmarks'
	// stand-ins); the policy's MCP servers add theirs.
	Tools []tools.Tool
	// Groups, if set, answers for user groups in approver lists; if it
	// answers for channel membership too (runner.Members), decisions
	// from an inbox use it.
	Groups runner.Groups
	// Stream: the front end shows answers as the model writes them.
	Stream bool
	// Redis, if set, is the client to use (its owner closes it) instead
	// of connecting to REDIS_URL; the cost hook is added to it.
	Redis redis.UniversalClient
	// Prefix, if set, prefixes every Redis key (redisstore.Options).
	Prefix string
	// WaitForRedis, if set, makes New wait for a REDIS_URL that does not
	// answer yet (nothing listens there, its name does not resolve, it
	// is loading its data) instead of failing: it tries again, 1 s
	// apart doubling to 30 s, until Redis answers or ctx ends, and calls
	// WaitForRedis with each failure (its secrets redacted). A Redis that
	// answers with a refusal waiting does not mend (a wrong password)
	// still fails New, as do the model's and the policy's configuration,
	// which New reads before it connects.
	WaitForRedis func(error)
	// Version, Revision and GoVersion describe the build, for metrics.
	Version, Revision, GoVersion string
}

// New wires a bot from the environment (getenv). report builds the front
// end's reporter once the store exists. Close the bot when done.
func New(ctx context.Context, getenv func(string) string, log logrus.FieldLogger,
	report func(*redisstore.Store) runner.Reporter, opts Options) (*Bot, error) {
	model := opts.Model
	if model == nil {
		var err error
		if model, err = llm.FromEnvWithLogger(getenv, log); err != nil {
			return nil, err
		}
	}
	policy := opts.Policy
	if policy == nil {
		var err error
		if policy, err = LoadPolicy(getenv); err != nil {
			return nil, err
		}
	}
	builtins := opts.Tools
	if builtins == nil {
		builtins = tools.Builtins(policy, nil)
	}
	box, err := newToolbox(getenv, policy, builtins, log)
	if err != nil {
		return nil, err
	}
	if err := checkSettings(getenv); err != nil {
		_ = box.Close()
		return nil, err
	}
	cost := metrics.NewRedisCost(redisstore.Operation, redisstore.Operations...)
	rdb, desc, closeRedis := opts.Redis, "given", func() {}
	if rdb != nil {
		rdb.AddHook(cost)
	} else if rdb, desc, closeRedis, err = connectRedis(ctx, getenv, log, opts.WaitForRedis, cost); err != nil {
		_ = box.Close()
		return nil, err
	}
	closeAll := func() { _ = box.Close(); closeRedis() }
	b, err := wire(ctx, getenv, log, report, opts, model, policy, box, rdb, cost)
	if err != nil {
		closeAll()
		return nil, err
	}
	b.Redis, b.close = desc, closeAll
	return b, nil
}

// checkSettings refuses, before Redis is asked anything, the settings
// that wire reads once it answers: an error in them is said at once, not
// after waiting for Redis (Options.WaitForRedis).
func checkSettings(getenv func(string) string) error {
	if _, _, err := replicasSetting(getenv); err != nil {
		return err
	}
	if _, err := auditRetention(getenv); err != nil {
		return err
	}
	if err := checkPublicURL(getenv); err != nil {
		return err
	}
	_, _, err := tokenKey(getenv)
	return err
}

// wire builds the store, the metrics, the agent and the runner on rdb.
func wire(ctx context.Context, getenv func(string) string, log logrus.FieldLogger, report func(*redisstore.Store) runner.Reporter,
	opts Options, model llm.Model, policy *tools.Policy, box *mcp.Manager, rdb redis.UniversalClient, cost *metrics.RedisCost) (*Bot, error) {
	warnOpenRedis(ctx, getenv, policy, log)
	replicas, err := WaitReplicas(ctx, getenv, rdb)
	if err != nil {
		return nil, err
	}
	if replicas > 0 {
		log.WithField("replicas", replicas).Info("saves and claims wait for Redis replicas to acknowledge them")
	}
	retention, err := auditRetention(getenv)
	if err != nil {
		return nil, err
	}
	images, err := llm.ImagesFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	// Chosen by the bot, the number of replicas to wait for follows
	// what each master has: after a failover promoted a master's only
	// replica, its slots are not refused until another joins.
	store := redisstore.New(rdb, redisstore.Options{Prefix: opts.Prefix, Replicas: replicas,
		ReplicasConnected: getenv("REDIS_WAIT_REPLICAS") == "", AuditRetention: retention})
	if err := store.RetireWaitingCounts(ctx); err != nil {
		log.WithError(err).Warn("an earlier version's waiting counts are kept without an expiry")
	}
	broker, err := NewBroker(getenv, log, store, policy)
	if err != nil {
		return nil, err
	}
	box.SetAuth(broker, nil)
	var toolNames []string
	for _, t := range box.FixedTools() { // MCP servers' tools come and go
		toolNames = append(toolNames, t.Name())
	}
	obs := metrics.New(store.WaitingTotal, metrics.Options{Version: opts.Version, Revision: opts.Revision, GoVersion: opts.GoVersion,
		Tools: toolNames, Redis: cost})
	checkpoints := obs.InstrumentStore(store)
	a, err := agent.New(model, box, checkpoints, agent.Options{
		Logger:          log,
		MaxCallsPerTurn: policy.CallsPerTurn(),
		ToolTimeout:     box.ToolTimeout(2 * time.Minute),
		OnModel:         obs.ModelCalled,
		NoImages:        !images,
	})
	if err != nil {
		return nil, err
	}
	// The Slack lookup of user groups tells channel members too, for
	// decisions from the Home tab.
	members, _ := opts.Groups.(runner.Members)
	// runner.New makes the service the agent's runner: its hooks before
	// and after every call cannot be left out. The store is its one
	// storage: claims, leases, the schedule, the audit trail and the
	// inbox, each step's records written in one round trip.
	svc := runner.New(a, store, report(store), runner.Options{
		Logger: log, Schedule: true, Audit: true, Inbox: true, Observer: obs, Groups: opts.Groups,
		Members: members, Stream: opts.Stream,
	})
	return &Bot{Images: images, Runner: svc, Store: store, Checkpoints: checkpoints, Metrics: obs, RedisCost: cost,
		Model: model, Policy: policy, Tools: box, Auth: broker}, nil
}

// Close records what the service has shown and not yet recorded
// (runner.Service.FlushRecords), stops the tools' servers and closes
// Redis (the embedded server too), unless the client was given.
func (b *Bot) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.Runner.FlushRecords(ctx) // what is not recorded may be shown again, no worse
	b.close()
}

// LoadPolicy is the tool policy of BOT_POLICY, or the defaults.
func LoadPolicy(getenv func(string) string) (*tools.Policy, error) {
	if path := getenv("BOT_POLICY"); path != "" {
		p, err := tools.LoadPolicy(path)
		if err != nil {
			return nil, fmt.Errorf("BOT_POLICY: %w (docs/policy.md describes the file; unset BOT_POLICY for the defaults)", err)
		}
		return p, nil
	}
	return tools.DefaultPolicy(), nil
}

// NewToolbox builds the bot's tools from BOT_POLICY (or the defaults):
// the built-in tools and those of the policy's MCP servers, which start
// when the tools are first needed.
func NewToolbox(getenv func(string) string, log logrus.FieldLogger) (*mcp.Manager, *tools.Policy, error) {
	policy, err := LoadPolicy(getenv)
	if err != nil {
		return nil, nil, err
	}
	box, err := newToolbox(getenv, policy, tools.Builtins(policy, nil), log)
	if err != nil {
		return nil, nil, err
	}
	return box, policy, nil
}

// newToolbox is mcp.New, with what it refuses in a policy file (a tool
// that does not exist) said as an error of BOT_POLICY, with what to do.
func newToolbox(getenv func(string) string, policy *tools.Policy, builtins []tools.Tool, log logrus.FieldLogger) (*mcp.Manager, error) {
	box, err := mcp.New(policy, builtins, mcp.Options{Logger: log})
	if err != nil && getenv("BOT_POLICY") != "" {
		return nil, fmt.Errorf("BOT_POLICY %s: %w: fix the name or leave the tool out (an MCP server's tools are named "+
			"<server>%s<tool>, after the server's name under mcp_servers:)", getenv("BOT_POLICY"), err, tools.MCPToolSeparator)
	}
	return box, err
}
