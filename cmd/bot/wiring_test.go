package main

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// TestWiredStoreLoadsTails checks that the checkpoint store the bot gives
// its agent, metrics wrapper included, is still a graph.TailLoader: a
// wrapper that hid it would make every step of a long thread load the
// thread's whole journal.
func TestWiredStoreLoadsTails(t *testing.T) {
	t.Parallel()
	env := map[string]string{"REDIS_URL": os.Getenv("REDIS_URL"), "LLM_PROVIDER": "demo"}
	log := logrus.New()
	log.SetOutput(io.Discard)
	quiet := runner.ReporterFunc(func(context.Context, runner.Event) error { return nil })
	svc, err := newService(context.Background(), func(k string) string { return env[k] }, log, nil, nil,
		func(*redisstore.Store) runner.Reporter { return quiet })
	if err != nil {
		t.Fatalf("newService: %v", err)
	}
	defer svc.Close()
	if _, ok := svc.Checkpoints.(graph.TailLoader); !ok {
		t.Fatalf("the wired checkpoint store %T is not a graph.TailLoader", svc.Checkpoints)
	}
}

// TestWaitReplicasOnACluster: on a cluster whose every master has a
// replica, saves and claims wait for one replica by default, as they do on
// a single server with a replica; without replicas they do not wait.
func TestWaitReplicasOnACluster(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	tests := []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
		want int
	}{
		{"replicated", func(t *testing.T) redis.UniversalClient { return redistest.ClusterWithReplicas(t).Client }, 1},
		{"no replicas", func(t *testing.T) redis.UniversalClient { return redistest.Cluster(t) }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := bot.WaitReplicas(context.Background(), none, tt.rdb(t)); err != nil || got != tt.want {
				t.Errorf("WaitReplicas() = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}
