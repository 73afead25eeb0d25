package bot_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/redisstore/redistest"
)

// With REDIS_URL unset and redis-server on PATH, ConnectRedis starts a
// redis-server on the state directory, whose password is in no file; a
// second process meanwhile (an operator command beside the bot) is told
// the directory is in use and leaves the server running; what was
// written is there after a restart.
func TestLocalRedisKeepsItsDataAndItsPassword(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	redistest.NeedsRealRedis(t, "redis-server on PATH, which the no-configuration default starts")
	state := t.TempDir()
	getenv := func(k string) string {
		if k == "XDG_STATE_HOME" {
			return state
		}
		return ""
	}
	if dir := bot.LocalRedisDir(getenv); dir != state+"/countersign" {
		t.Fatalf("LocalRedisDir() = %q, want %s/countersign", dir, state)
	}
	log := logrus.New()
	log.Out = io.Discard
	ctx := context.Background()

	first, desc, closeFirst, err := bot.ConnectRedis(ctx, getenv, log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(desc, state) {
		t.Errorf("ConnectRedis described its Redis as %q, want the state directory named", desc)
	}
	if err := first.Set(ctx, "cs:kept", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, closeSecond, err := bot.ConnectRedis(ctx, getenv, log); !errors.Is(err, bot.ErrLocalRedisInUse) {
		if err == nil {
			closeSecond()
		}
		t.Errorf("a second process beside the running bot: %v; want ErrLocalRedisInUse", err)
	}
	if err := first.Ping(ctx).Err(); err != nil {
		t.Errorf("the server stopped when the second process gave up: %v", err)
	}
	// No file in the directory holds the password the server wants.
	c, ok := first.(*redis.Client)
	if !ok {
		t.Fatalf("the local Redis's client is a %T, want a *redis.Client", first)
	}
	password := c.Options().Password
	if password == "" {
		t.Fatal("the local redis-server takes no password")
	}
	err = filepath.WalkDir(state, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), password) {
			t.Errorf("%s holds the local Redis's password", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	closeFirst()

	again, _, closeAgain, err := bot.ConnectRedis(ctx, getenv, log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAgain()
	if v, err := again.Get(ctx, "cs:kept").Result(); err != nil || v != "v1" {
		t.Errorf("after a restart the key is %q, %v; want v1", v, err)
	}
}
