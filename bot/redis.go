package bot

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/tools"
)

// redisPoolSize is the connection pool when REDIS_URL sets none
// (?pool_size=): room for every background job the handlers run at once
// (16 per CPU) and the requests being acknowledged beside them, which
// must not wait for a connection.
var redisPoolSize = 24 * runtime.GOMAXPROCS(0)

// ConnectRedis connects to REDIS_URL (a cluster if REDIS_CLUSTER=true) or,
// when it is unset, starts a local redis-server that keeps its data in the
// state directory (see localredis.go, LocalRedisDir) or, without
// redis-server on PATH, an embedded in-process Redis that keeps nothing. It returns the client, a
// description for the start-up line, and a function that closes both.
// hooks are added to the client before its first command (on a cluster,
// to every node's client), so that they see every command the bot sends.
func ConnectRedis(ctx context.Context, getenv func(string) string, log logrus.FieldLogger, hooks ...redis.Hook) (redis.UniversalClient, string, func(), error) {
	return connectRedis(ctx, getenv, log, nil, hooks...)
}

// The back-off between tries of a Redis that does not answer yet
// (Options.WaitForRedis): from RedisRetryFrom, doubling, to
// RedisRetryUpTo.
const (
	RedisRetryFrom = time.Second
	RedisRetryUpTo = 30 * time.Second
)

// connectRedis is ConnectRedis; with wait set, a REDIS_URL that does not
// answer yet is tried again until it does (Options.WaitForRedis).
func connectRedis(ctx context.Context, getenv func(string) string, log logrus.FieldLogger, wait func(error), hooks ...redis.Hook) (redis.UniversalClient, string, func(), error) {
	raw := getenv("REDIS_URL")
	// A wrong REDIS_CLUSTER is refused even where it is not read (no
	// REDIS_URL): it would be the day REDIS_URL is set.
	cluster, err := redisCluster(getenv)
	if err != nil {
		return nil, "", nil, err
	}
	if dir := LocalRedisDir(getenv); dir != "" {
		l, err := startLocalRedis(ctx, dir)
		if errors.Is(err, ErrLocalRedisInUse) {
			return nil, "", nil, err // it names the directory and what to do
		}
		if err != nil {
			return nil, "", nil, fmt.Errorf("local redis-server in %s (set REDIS_URL to use another Redis): %w", dir, err)
		}
		rdb := redis.NewClient(l.options())
		for _, h := range hooks {
			rdb.AddHook(h)
		}
		logLocalRedis(log, l)
		return rdb, "local redis-server (data in " + dir + "; delete it to start afresh)", func() { _ = rdb.Close(); l.close() }, nil
	}
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
		log.Warn("REDIS_URL is not set and " + noLocalRedis(getenv) + ": using an embedded in-process Redis; all threads are lost when the bot exits. " +
			"With redis-server on PATH they are kept in " + stateDirOrDefault(getenv) + "; or set REDIS_URL=redis://host:6379/0.")
		closeAll := func() { _ = rdb.Close(); close(stop); m.Close() }
		return rdb, "embedded (in-process, data lost on exit)", closeAll, nil
	}
	// go-redis logs (reconnects, pool trouble) through the bot's logger,
	// so that with LOG_FORMAT=json every line is JSON.
	redis.SetLogger(newRedisLogger(log, time.Now))
	var secrets tools.Secrets
	secrets.AddURL(raw, nil)
	var rdb redis.UniversalClient
	if cluster {
		opts, err := parseRedisClusterURL(raw)
		if err != nil {
			return nil, "", nil, err
		}
		if opts.PoolSize == 0 {
			opts.PoolSize = redisPoolSize
		}
		cc := redis.NewClusterClient(opts)
		cc.OnNewNode(func(node *redis.Client) {
			for _, h := range hooks {
				node.AddHook(h)
			}
			node.AddHook(followFailovers{cc})
		})
		rdb = cc
	} else {
		opts, err := parseRedisURL(raw)
		if err != nil {
			return nil, "", nil, err
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
	// The first ping's failure is the error returned, said once: not
	// also go-redis's line for each dial it retried (which it logs
	// without the command's context, so the logger is hushed instead).
	quietRedisLog.Add(1)
	err = firstPing(ctx, rdb, func(err error) error {
		return fmt.Errorf("connect to redis at %s: %w%s", secrets.Redact(raw), secrets.RedactError(err), redisDialHint(err))
	}, wait)
	quietRedisLog.Add(-1)
	if err != nil {
		_ = rdb.Close()
		return nil, "", nil, err
	}
	return rdb, secrets.Redact(raw), func() { _ = rdb.Close() }, nil
}

// redisDialHint is what to do about a REDIS_URL where nothing answers:
// the bot cannot reach the address at all (as against a Redis that
// refuses the password, whose error says so itself).
func redisDialHint(err error) string {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return ""
	}
	return " (is a Redis server running at that address? Start one, fix REDIS_URL, or unset it to have the bot start its own)"
}

// firstPing pings rdb, and returns the failure as describe says it. With
// wait set, a failure that waiting may mend (redisMayAnswer) is passed to
// wait and the ping tried again, after a back-off, until it answers, it
// fails otherwise, or ctx ends.
func firstPing(ctx context.Context, rdb redis.UniversalClient, describe func(error) error, wait func(error)) error {
	delay := RedisRetryFrom
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := rdb.Ping(pingCtx).Err()
		cancel()
		switch {
		case err == nil:
			return nil
		case wait == nil || !redisMayAnswer(err):
			return describe(err)
		case ctx.Err() != nil:
			return fmt.Errorf("waiting for redis: %w", ctx.Err())
		}
		wait(describe(err))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for redis: %w", ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, RedisRetryUpTo)
	}
}

// redisMayAnswer reports whether a failed ping may succeed later without
// a change of configuration: Redis is not listening (yet), its name does
// not resolve (yet), it does not answer in time, or it answers that it
// is loading its data or has no master. A Redis that refuses the
// password or the database, or a certificate that does not verify, is
// not mended by waiting.
func redisMayAnswer(err error) bool {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		for _, transient := range []string{"LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY"} {
			if strings.HasPrefix(rerr.Error(), transient+" ") {
				return true
			}
		}
		return false
	}
	var cert *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	return !errors.As(err, &cert) && !errors.As(err, &header)
}

// ErrRedisURL is a REDIS_URL that is not a URL. The URL is not quoted,
// nor where reading it stopped: that can be inside the password, which
// is where the characters that break a URL usually are.
var ErrRedisURL = errors.New("REDIS_URL is not a URL of the form redis://[user:password@]host:port[/db] " +
	"(rediss:// for TLS): percent-encode each character of the password other than letters, digits, -, ., _ and ~")

// errRedisURLNoScheme is ErrRedisURL for a REDIS_URL without a scheme
// (localhost:6379), said as such: the advice about the password is for
// a URL that breaks inside it. It quotes nothing of the value, which may
// hold a password all the same.
var errRedisURLNoScheme = redisURLProblem("REDIS_URL is not a URL of the form redis://[user:password@]host:port[/db] " +
	"(rediss:// for TLS): it has no scheme; write redis:// before the host, e.g. redis://localhost:6379/0")

// redisURLProblem is a REDIS_URL that is not a URL, said in its own words;
// it is ErrRedisURL.
type redisURLProblem string

func (e redisURLProblem) Error() string        { return string(e) }
func (e redisURLProblem) Is(target error) bool { return target == ErrRedisURL }

// redisCluster reads REDIS_CLUSTER: whether REDIS_URL names a Redis
// Cluster. Unset is false. A value that is neither true nor false (1, 0,
// t, f in any case) is an error, rather than a client for one server
// sent to a cluster, or the other way round.
func redisCluster(getenv func(string) string) (bool, error) {
	v := getenv("REDIS_CLUSTER")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.ToLower(v))
	if err != nil {
		return false, fmt.Errorf("REDIS_CLUSTER=%q: want true (REDIS_URL names a Redis Cluster node) or false", v)
	}
	return b, nil
}

// parseRedisURL reads REDIS_URL for one server; parseRedisClusterURL for
// a cluster. Their errors hold nothing of the URL's secrets.
func parseRedisURL(raw string) (*redis.Options, error) {
	if err := checkRedisURL(raw); err != nil {
		return nil, err
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return nil, redisURLError(raw, "REDIS_URL", err)
	}
	return opts, nil
}

func parseRedisClusterURL(raw string) (*redis.ClusterOptions, error) {
	if err := checkRedisURL(raw); err != nil {
		return nil, err
	}
	opts, err := redis.ParseClusterURL(raw)
	if err != nil {
		return nil, redisURLError(raw, "REDIS_URL (cluster)", err)
	}
	return opts, nil
}

// checkRedisURL refuses a URL without a scheme (localhost:6379), and a
// URL with an @ after its authority ends (at the first /, ? or #): a
// password holding one of those unencoded. Read as
// it is, the rest of the password would be the database number or
// options, which errors quote.
func checkRedisURL(raw string) error {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return errRedisURLNoScheme // host:port alone, say: go-redis would call the host a scheme
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 && strings.LastIndexByte(rest, '@') > end {
		return ErrRedisURL
	}
	return nil
}

// redisURLError is err, from go-redis reading raw, without raw's secrets.
func redisURLError(raw, what string, err error) error {
	var bad *url.Error
	if errors.As(err, &bad) {
		return ErrRedisURL
	}
	var secrets tools.Secrets
	secrets.AddURL(raw, nil)
	return fmt.Errorf("%s: %w", what, secrets.RedactError(err))
}

// WaitReplicas is how many Redis replicas must acknowledge the writes that
// gate a side effect: REDIS_WAIT_REPLICAS if set, else 1 when the server —
// on a cluster, every master — has a replica connected, else 0.
func WaitReplicas(ctx context.Context, getenv func(string) string, rdb redis.UniversalClient) (int, error) {
	if n, set, err := replicasSetting(getenv); set || err != nil {
		return n, err
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

// ReplicasSetting is REDIS_WAIT_REPLICAS: how many replicas, and whether
// it is set (an operator command that reads what a failover must not
// lose waits for them only then, at no cost otherwise).
func ReplicasSetting(getenv func(string) string) (n int, set bool, err error) {
	return replicasSetting(getenv)
}

// replicasSetting is REDIS_WAIT_REPLICAS: whether it is set, and to how
// many replicas.
func replicasSetting(getenv func(string) string) (n int, set bool, err error) {
	v := getenv("REDIS_WAIT_REPLICAS")
	if v == "" {
		return 0, false, nil
	}
	n, err = strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, true, fmt.Errorf("REDIS_WAIT_REPLICAS=%q: want a whole number of replicas, 0 or more", v)
	}
	return n, true, nil
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

// redisLogger is go-redis's logger on logrus. A line that repeats — the
// pool's failed dial, at every command while Redis is down — is logged
// the first time, then at most once every redisLogRepeat, with how many
// times it came in between: an outage is a few lines, not one a command.
// It is safe for concurrent use.
type redisLogger struct {
	log logrus.FieldLogger
	now func() time.Time

	mu   sync.Mutex
	seen map[string]*redisRepeat // by format
}

// redisRepeat is when a line was last logged, and how many times it came
// since.
type redisRepeat struct {
	logged time.Time
	hushed int
}

// redisLogRepeat is how often a line of go-redis that repeats is logged.
const redisLogRepeat = time.Minute

func newRedisLogger(log logrus.FieldLogger, now func() time.Time) *redisLogger {
	return &redisLogger{log: log, now: now, seen: map[string]*redisRepeat{}}
}

// quietRedisLog, while above zero, hushes go-redis's log: a connection's
// first ping is under way, whose failure its caller reports.
var quietRedisLog atomic.Int32

func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	if quietRedisLog.Load() > 0 {
		return
	}
	now := l.now()
	l.mu.Lock()
	r := l.seen[format]
	if r != nil && now.Sub(r.logged) < redisLogRepeat {
		r.hushed++
		l.mu.Unlock()
		return
	}
	if r == nil {
		if len(l.seen) >= 64 { // go-redis's formats are few; stay bounded
			clear(l.seen)
		}
		r = &redisRepeat{}
		l.seen[format] = r
	}
	hushed := r.hushed
	r.logged, r.hushed = now, 0
	l.mu.Unlock()
	log := l.log.WithField("component", "redis")
	if hushed > 0 {
		log = log.WithField("repeated", hushed)
	}
	log.Warnf(format, v...)
}

// noLocalRedis says why the no-configuration default keeps nothing.
func noLocalRedis(getenv func(string) string) string {
	switch {
	case !canLock:
		return "this platform cannot lock a state directory"
	case StateDir(getenv) == "":
		return "neither XDG_STATE_HOME nor HOME is set"
	}
	return "there is no redis-server on PATH"
}

// stateDirOrDefault names the state directory for a message, even when
// there is none.
func stateDirOrDefault(getenv func(string) string) string {
	if d := StateDir(getenv); d != "" {
		return d
	}
	return "~/.local/state/countersign"
}

// embeddedRedisPassword is a password for the embedded Redis, new at
// every start and known to this process only: the embedded server
// listens on 127.0.0.1, where a tool server could otherwise reach it.
func embeddedRedisPassword() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// warnOpenRedis warns when the policy has a stdio MCP server and Redis
// answers a connection that gives no password: a process on the same
// host, such as that server, could then write a claim or a decision
// directly. It connects once more, without the credentials of
// REDIS_URL, and says only whether Redis answered.
func warnOpenRedis(ctx context.Context, getenv func(string) string, policy *tools.Policy, log logrus.FieldLogger) {
	raw := getenv("REDIS_URL")
	var stdio []string
	for name, s := range policy.MCPServers {
		if len(s.Command) > 0 {
			stdio = append(stdio, name)
		}
	}
	if len(stdio) == 0 {
		return
	}
	if raw == "" {
		// The local redis-server's password is in no file, but its data
		// is in the state directory, which a stdio server started as
		// the bot's own user may write like any of that user's files.
		if dir := LocalRedisDir(getenv); dir != "" && os.Geteuid() != 0 {
			log.WithFields(logrus.Fields{"mcp_servers": strings.Join(stdio, ","), "dir": dir}).Warn("the policy starts stdio MCP servers as this bot's user, " +
				"who owns the local Redis's data in " + dir + ": such a server could change it while the bot is stopped. " +
				"Run the bot as root (servers then run as nobody, or as their user:) or set REDIS_URL to a Redis with a password.")
		}
		return
	}
	var opts *redis.Options
	if cluster, _ := redisCluster(getenv); cluster { // connectRedis refuses a bad value
		c, err := redis.ParseClusterURL(raw)
		if err != nil || len(c.Addrs) == 0 {
			return
		}
		opts = &redis.Options{Addr: c.Addrs[0], TLSConfig: c.TLSConfig}
	} else {
		o, err := redis.ParseURL(raw)
		if err != nil {
			return
		}
		opts = &redis.Options{Addr: o.Addr, Network: o.Network, TLSConfig: o.TLSConfig}
	}
	opts.MaxRetries, opts.PoolSize, opts.DialTimeout = -1, 1, 2*time.Second
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if rdb.Ping(ctx).Err() == nil {
		log.WithField("mcp_servers", strings.Join(stdio, ",")).Warn("Redis accepts connections without a password, and the policy starts stdio MCP servers: " +
			"a process on this host could write claims and decisions into Redis directly. Require a password (requirepass, or an ACL user) and put it in REDIS_URL.")
	}
}

// followFailovers makes a cluster client read the slot map again as soon
// as a node cannot be reached. When a master dies its replica takes its
// slots over, but go-redis keeps sending their commands to the dead node
// — "connection refused", and the bot answers "try again" — until it
// reloads the map on its own, a minute later: a failover would cost that
// minute instead of the seconds of the election. The reload runs in the
// background, at most one at a time (go-redis spaces them 200 ms apart).
type followFailovers struct{ cc *redis.ClusterClient }

func (f followFailovers) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f followFailovers) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		f.unreachable(ctx, err)
		return err
	}
}

func (f followFailovers) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		f.unreachable(ctx, err)
		return err
	}
}

// unreachable reloads the slot map if err says a node could not be
// dialled.
func (f followFailovers) unreachable(ctx context.Context, err error) {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		f.cc.ReloadState(ctx)
	}
}
