package redisstore_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/mcpauth"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

// One contract for every mcpauth.Store: the real Redis and the one in
// memory.
func TestMCPAuthStoreContract(t *testing.T) {
	t.Parallel()
	stores := map[string]mcpauth.Store{
		"redis":  redisstore.New(redistest.Client(t), redisstore.Options{Prefix: uniqueName("mcpauth")}),
		"memory": mcpauth.NewMemStore(),
	}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if v, err := s.Connection(ctx, "tickets", "U1"); v != nil || err != nil {
				t.Fatalf("Connection(none) = %q, %v; want nil, nil", v, err)
			}
			_ = s.PutConnection(ctx, "tickets", "U1", []byte("sealed-1"))
			_ = s.PutConnection(ctx, "tickets", mcpauth.Service, []byte("sealed-s"))
			_ = s.PutConnection(ctx, "wiki", "U2", []byte("sealed-2"))
			if v, _ := s.Connection(ctx, "tickets", "U1"); string(v) != "sealed-1" {
				t.Errorf("Connection = %q, want sealed-1", v)
			}
			all, _ := s.Connections(ctx, "")
			want := []mcpauth.Identity{{Server: "tickets", User: mcpauth.Service}, {Server: "tickets", User: "U1"}, {Server: "wiki", User: "U2"}}
			if !slices.Equal(all, want) {
				t.Errorf("Connections() = %v, want %v", all, want)
			}
			if one, _ := s.Connections(ctx, "wiki"); len(one) != 1 || one[0].User != "U2" {
				t.Errorf("Connections(wiki) = %v", one)
			}
			if ok, _ := s.DeleteConnection(ctx, "tickets", "U1"); !ok {
				t.Error("DeleteConnection = false, want true")
			}
			if ok, _ := s.DeleteConnection(ctx, "tickets", "U1"); ok {
				t.Error("second DeleteConnection = true")
			}
			// An authorization request is taken once, by one of several
			// takers at the same time.
			_ = s.PutAuthState(ctx, "st-1", []byte("rec"), time.Minute)
			var wg sync.WaitGroup
			var mu sync.Mutex
			got := 0
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if v, err := s.TakeAuthState(ctx, "st-1"); err == nil && string(v) == "rec" {
						mu.Lock()
						got++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if got != 1 {
				t.Errorf("the request was taken %d times, want once", got)
			}
			if v, _ := s.TakeAuthState(ctx, "st-unknown"); v != nil {
				t.Error("an unknown state was found")
			}
		})
	}
}
