package bot_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/redisstore/redistest"
)

// With REDIS_URL unset and redis-server on PATH, ConnectRedis starts a
// redis-server on the state directory; a second process meanwhile (an
// operator command beside the bot) uses that server and leaves it
// running when it closes; what was written is there after a restart.
func TestLocalRedisIsSharedAndKeepsItsData(t *testing.T) {
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
	second, _, closeSecond, err := bot.ConnectRedis(ctx, getenv, log)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := second.Get(ctx, "cs:kept").Result(); err != nil || v != "v1" {
		t.Errorf("a second process read %q, %v; want the first's server and v1", v, err)
	}
	closeSecond()
	if err := first.Ping(ctx).Err(); err != nil {
		t.Errorf("the server stopped when the second process closed: %v", err)
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
