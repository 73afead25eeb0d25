package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// closeProc makes the bot non-dumpable before anything else runs, so
// that no process of its user, tool servers included, reads its
// environment or memory through /proc (see mcp.NonDumpable). The bot
// starts its stdio servers only if this worked or they run as another
// user.
func closeProc() {
	if err := mcp.NonDumpable(); err != nil {
		fmt.Fprintln(os.Stderr, "bot: warning: cannot make the process non-dumpable:", err)
	}
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
	if raw == "" || len(stdio) == 0 {
		return
	}
	var opts *redis.Options
	if strings.EqualFold(getenv("REDIS_CLUSTER"), "true") {
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
