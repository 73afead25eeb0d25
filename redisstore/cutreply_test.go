package redisstore_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

// TestFirstOrRepeatSurvivesACutAnswer: the writes whose answer says
// "first" or "repeat" — Dedup of a click or an event, Accept of a
// request — are retried by go-redis when their answer is lost. The
// retry finds what its own first attempt wrote, and must still say
// "first": taken for a repeated delivery, the click is dropped with a 200
// to Slack and no answer to the person.
func TestFirstOrRepeatSurvivesACutAnswer(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		write func(s *redisstore.Store) (bool, error)
	}{
		{"dedup", func(s *redisstore.Store) (bool, error) {
			return s.Dedup(ctx, "action:U0BOB:1700000000.1:approve", time.Minute)
		}},
		{"accept", func(s *redisstore.Store) (bool, error) {
			return s.Accept(ctx, "event:Ev0CUT", rand.Text(), []byte(`{"kind":"reply"}`), time.Now().Add(15*time.Second), time.Minute)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb, cutter := redistest.CutClient(t, "CUTME")
			s := redisstore.New(rdb, redisstore.Options{Prefix: uniqueName("cut-" + tt.name + "-CUTME")})
			cutter.Arm()
			first, err := tt.write(s)
			if cutter.Cuts() != 1 {
				t.Fatalf("%d answers were cut, want 1: the test does not test anything", cutter.Cuts())
			}
			if err != nil || !first {
				t.Fatalf("%s with its answer cut once = %v, %v; want true: the retry took its own write for a repeat", tt.name, first, err)
			}
			if again, err := tt.write(s); err != nil || again {
				t.Errorf("%s of a real repeat = %v, %v; want false", tt.name, again, err)
			}
		})
	}
}
