package bot

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/redisstore/redistest"
)

// A REDIS_URL whose password holds a character that breaks a URL (an
// unencoded /, ? or #, a stray %) is refused in words that quote none
// of it: not the URL, not where go-redis stopped reading, not the part
// it took for the database number.
func TestBadRedisURLHidesThePassword(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	log := logrus.New()
	log.Out = &strings.Builder{}
	for _, password := range []string{"s3cr3tpa55/w0rdxyz", "s3cr3tpa55#w0rdxyz", "s3cr3tpa55?w0rdxyz", "s3cr3tpa55%zzw0rdxyz", "1234/s3cr3tpa55"} {
		for _, cluster := range []string{"false", "true"} {
			env := map[string]string{"REDIS_URL": "redis://default:" + password + "@127.0.0.1:6379/0", "REDIS_CLUSTER": cluster}
			_, _, _, err := ConnectRedis(context.Background(), func(k string) string { return env[k] }, log)
			if !errors.Is(err, ErrRedisURL) {
				t.Errorf("password %q (cluster %s): %v; want ErrRedisURL", password, cluster, err)
			}
			if err != nil && (strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "w0rd")) {
				t.Errorf("password %q (cluster %s): the error quotes it: %v", password, cluster, err)
			}
		}
	}
}

// A REDIS_URL without a scheme is said to have none, with a URL to copy,
// not sent to encode a password it may not have; and it quotes nothing of
// the value, which may hold a password all the same.
func TestRedisURLWithoutAScheme(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	log := logrus.New()
	log.Out = &strings.Builder{}
	for _, raw := range []string{"localhost:6379", "default:s3cr3tpa55@10.0.0.7:6379/0"} {
		for _, cluster := range []string{"false", "true"} {
			env := map[string]string{"REDIS_URL": raw, "REDIS_CLUSTER": cluster}
			_, _, _, err := ConnectRedis(context.Background(), func(k string) string { return env[k] }, log)
			if !errors.Is(err, ErrRedisURL) || !strings.Contains(err.Error(), "it has no scheme; write redis:// before the host, e.g. redis://localhost:6379/0") ||
				strings.Contains(err.Error(), "percent-encode") {
				t.Errorf("REDIS_URL %s (cluster %s): %v; want ErrRedisURL saying it has no scheme", raw, cluster, err)
			}
			if err != nil && (strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "10.0.0.7")) {
				t.Errorf("REDIS_URL %s (cluster %s): the error quotes it: %v", raw, cluster, err)
			}
		}
	}
}

// Whatever the password, an error in reading REDIS_URL does not hold it.
func FuzzRedisURLError(f *testing.F) {
	for _, p := range []string{"hunter2hunter2", "ab/cd+e=ffff", "ab#cdefgh", "abc?defgh", "ab%zzcdefg", "1234/abcdefgh", "a@b/cdefgh", "ab:cd@ef/gh"} {
		f.Add(p)
	}
	// Text an error may hold whatever the password: a password that is a
	// piece of it is not found through the password.
	fixed := ErrRedisURL.Error() + ` REDIS_URL (cluster): redis: invalid URL scheme database number "default 127.0.0.1:6379/0 ••••••`
	f.Fuzz(func(t *testing.T, password string) {
		if len(password) < 6 || strings.Contains(fixed, password) {
			return
		}
		raw := "redis://default:" + password + "@127.0.0.1:6379/0"
		_, err1 := parseRedisURL(raw)
		_, err2 := parseRedisClusterURL(raw)
		for _, err := range []error{err1, err2} {
			if err != nil && strings.Contains(err.Error(), password) {
				t.Errorf("REDIS_URL %q: the error holds the password: %v", raw, err)
			}
		}
	})
}

// A REDIS_URL nobody answers at is one error, not also a warning from
// the Redis client for every dial it tried first.
func TestUnreachableRedisIsSaidOnce(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	addr, env, log, logs := unansweredRedis(t)
	_, _, _, err := ConnectRedis(context.Background(), func(k string) string { return env[k] }, log)
	if err == nil || !strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("ConnectRedis to %s: %v; want connection refused, without the password", addr, err)
	}
	if logs.Len() != 0 {
		t.Errorf("ConnectRedis to %s logged, besides its error: %q", addr, logs.String())
	}
}

// Waiting for a Redis that does not answer: each failure is passed on
// without the password, and nothing else is logged; the wait ends with
// its context.
func TestWaitForRedisHidesThePassword(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	addr, env, log, logs := unansweredRedis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var failures []error
	_, _, _, err := connectRedis(ctx, func(k string) string { return env[k] }, log, func(err error) {
		failures = append(failures, err)
		cancel() // one failure is enough
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("connectRedis, stopped while waiting: %v; want context.Canceled", err)
	}
	if len(failures) != 1 || !strings.Contains(failures[0].Error(), "connection refused") || strings.Contains(failures[0].Error(), "s3cr3t") {
		t.Errorf("failures passed on: %v; want one, connection refused, without the password", failures)
	}
	if logs.Len() != 0 {
		t.Errorf("connectRedis to %s logged while waiting: %q", addr, logs.String())
	}
}

// A Redis that answers with a refusal waiting does not mend (a database
// it does not have) is not waited for.
func TestWaitForRedisNotForARefusal(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	url := os.Getenv("REDIS_URL")
	if url == "" {
		t.Skip("needs REDIS_URL")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.Out = &strings.Builder{}
	env := map[string]string{"REDIS_URL": "redis://" + opts.Addr + "/99999"}
	waited := 0
	_, _, _, err = connectRedis(context.Background(), func(k string) string { return env[k] }, log, func(error) { waited++ })
	if err == nil || waited != 0 || !strings.Contains(err.Error(), "DB index") {
		t.Errorf("connectRedis to a database Redis does not have: %v after waiting %d times; want its error at once", err, waited)
	}
}

// unansweredRedis returns an address where nothing listens, the bot's
// environment with a REDIS_URL there (password s3cr3t), and a logger
// whose lines logs collects.
func unansweredRedis(t *testing.T) (addr string, env map[string]string, log *logrus.Logger, logs *strings.Builder) {
	t.Helper()
	addr = redistest.RefusedAddr(t)
	logs = &strings.Builder{}
	log = logrus.New()
	log.Out = logs
	return addr, map[string]string{"REDIS_URL": "redis://default:s3cr3t@" + addr + "/0"}, log, logs
}

// REDIS_CLUSTER is true or false: a value that is neither stops the bot,
// naming the variable, instead of talking to a cluster as to one server.
func TestRedisClusterIsTrueOrFalse(t *testing.T) {
	// Not parallel: connecting sets go-redis's logger, which is global.
	for v, want := range map[string]bool{"": false, "true": true, "TRUE": true, "True": true, "1": true, "false": false, "0": false} {
		got, err := redisCluster(func(string) string { return v })
		if err != nil || got != want {
			t.Errorf("REDIS_CLUSTER=%q: %v, %v; want %v", v, got, err, want)
		}
	}
	// Refused with a REDIS_URL, and without one too (the local Redis,
	// which does not read it), before anything is started.
	for _, v := range []string{"yes", "on", "cluster", " true"} {
		for _, env := range []map[string]string{
			{"REDIS_URL": "redis://127.0.0.1:1/0", "REDIS_CLUSTER": v},
			{"XDG_STATE_HOME": t.TempDir(), "REDIS_CLUSTER": v},
		} {
			_, _, _, err := ConnectRedis(context.Background(), func(k string) string { return env[k] }, logrus.New())
			if err == nil || !strings.Contains(err.Error(), "REDIS_CLUSTER=") || !strings.Contains(err.Error(), "want true") {
				t.Errorf("REDIS_CLUSTER=%q, REDIS_URL=%q: %v; want an error naming REDIS_CLUSTER and what it takes", v, env["REDIS_URL"], err)
			}
		}
	}
}
