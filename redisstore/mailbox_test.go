package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
)

func TestMailbox(t *testing.T) {
	t.Parallel()
	s := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: uniqueName("mailbox")})
	ctx := context.Background()
	got := make(chan string, 1)
	go func() {
		v, err := s.Receive(ctx, "elicit:1")
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(v)
	}()
	if err := s.Deliver(ctx, "elicit:1", []byte(`{"action":"accept"}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != `{"action":"accept"}` {
		t.Errorf("Receive = %q, want the delivered answer", v)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.Receive(short, "elicit:2"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Receive(nothing delivered) = %v, want the deadline", err)
	}
}

var _ interface {
	Deliver(context.Context, string, []byte, time.Duration) error
	Receive(context.Context, string) ([]byte, error)
} = (*redisstore.Store)(nil)
