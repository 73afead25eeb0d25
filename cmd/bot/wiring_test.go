package main

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
)

// TestWiredStoreLoadsTails checks that the checkpoint store the bot gives
// its agent, metrics wrapper included, is still a graph.TailLoader: a
// wrapper that hid it would make every step of a long thread load the
// thread's whole journal.
func TestWiredStoreLoadsTails(t *testing.T) {
	env := map[string]string{"REDIS_URL": os.Getenv("REDIS_URL"), "LLM_PROVIDER": "demo"}
	log := logrus.New()
	log.SetOutput(io.Discard)
	quiet := runner.ReporterFunc(func(context.Context, runner.Event) error { return nil })
	svc, err := newService(context.Background(), func(k string) string { return env[k] }, log, nil, nil,
		func(*redisstore.Store) runner.Reporter { return quiet })
	if err != nil {
		t.Fatalf("newService: %v", err)
	}
	defer svc.close()
	if _, ok := svc.checkpoints.(graph.TailLoader); !ok {
		t.Fatalf("the wired checkpoint store %T is not a graph.TailLoader", svc.checkpoints)
	}
}
