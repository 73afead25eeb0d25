package bot_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/redisstore/redistest"
)

// The local redis-server is started without the bot's environment: the
// Slack token, the signing secret and the model's key set in the bot's
// are not in the server's. The redis-server the bot finds on PATH is a
// script that writes down the environment it was given and runs the
// real one (redis-server overwrites its own /proc environ with its
// process title, so that cannot be read).
func TestLocalRedisGetsNoneOfTheBotsSecrets(t *testing.T) {
	redistest.NeedsRealRedis(t, "redis-server on PATH, which the no-configuration default starts")
	real, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	seen := filepath.Join(bin, "environ")
	script := "#!/bin/sh\n/usr/bin/env > '" + seen + "'\nexec '" + real + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "redis-server"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	secrets := map[string]string{
		"SLACK_BOT_TOKEN":      "xoxb-local-redis-must-not-see-this",
		"SLACK_SIGNING_SECRET": "signing-secret-local-redis-must-not-see",
		"OPENAI_API_KEY":       "sk-local-redis-must-not-see-this",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	state := t.TempDir()
	getenv := func(k string) string {
		if k == "XDG_STATE_HOME" {
			return state
		}
		return "" // no REDIS_URL: the local redis-server
	}
	log := logrus.New()
	log.Out = io.Discard
	rdb, _, closeRedis, err := bot.ConnectRedis(context.Background(), getenv, log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeRedis()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile(seen)
	if err != nil {
		t.Fatalf("the redis-server on PATH was not the one started: %v", err)
	}
	for k, v := range secrets {
		if strings.Contains(string(environ), v) || strings.Contains(string(environ), k+"=") {
			t.Errorf("the local redis-server was started with %s", k)
		}
	}
}
