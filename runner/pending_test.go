package runner_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// batchesStore is a store that keeps the threads of each
// RecordDeliveries call.
type batchesStore struct {
	runner.Store
	mu      sync.Mutex
	batches [][]string
}

func (b *batchesStore) RecordDeliveries(ctx context.Context, ds []runner.Deliveries) []error {
	var threads []string
	for _, d := range ds {
		threads = append(threads, d.Thread)
	}
	b.mu.Lock()
	b.batches = append(b.batches, threads)
	b.mu.Unlock()
	return b.Store.RecordDeliveries(ctx, ds)
}

func (b *batchesStore) recorded() (calls int, threads map[string]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	threads = map[string]int{}
	for _, batch := range b.batches {
		for _, th := range batch {
			threads[th]++
		}
	}
	return len(b.batches), threads
}

// answerThreads starts n threads on svc, each answered at once, and
// returns their names.
func answerThreads(t *testing.T, svc *runner.Service, rep *recorder, n int) []string {
	t.Helper()
	var threads []string
	for i := range n {
		th := fmt.Sprintf("th-%d", i)
		if err := svc.Start(context.Background(), runner.StartRequest{Thread: th, Requester: "U_ALICE", Text: "chat: hello"}); err != nil {
			t.Fatal(err)
		}
		threads = append(threads, th)
	}
	if got := rep.answers(); len(got) != n {
		t.Fatalf("the replica showed %d answers, want %d", len(got), n)
	}
	return threads
}

// batchedWorld is a world on a Redis of its own, with a schedule, whose
// store counts the writes of what was shown (batches).
func batchedWorld(t *testing.T) (world, *batchesStore) {
	w, _ := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	w.schedule = true
	batches := &batchesStore{}
	w.leases = func(s *redisstore.Store) runner.Store { batches.Store = s; return batches }
	return w, batches
}

// TestShownInManyThreadsRecordedTogether: a replica answers in many
// threads, each a first turn, and records that it showed the answers in
// one write for them all; a replica that looks at those threads then
// shows none of them again.
func TestShownInManyThreadsRecordedTogether(t *testing.T) {
	defer runner.SetRecordAfter(time.Hour)()
	ctx := context.Background()
	w, batches := batchedWorld(t)
	repA := &recorder{}
	a, _ := w.service(t, repA, 5*time.Second)
	const n = 12
	threads := answerThreads(t, a, repA, n)
	if calls, _ := batches.recorded(); calls != 0 {
		t.Fatalf("%d writes of what was shown before any was due, want none", calls)
	}
	if err := a.FlushRecords(ctx); err != nil {
		t.Fatal(err)
	}
	if calls, recorded := batches.recorded(); calls != 1 || len(recorded) != n {
		t.Fatalf("what %d threads showed was written in %d calls for %d threads, want 1 call for all", n, calls, len(recorded))
	}
	w.leases = nil
	repB := &recorder{}
	b, _ := w.service(t, repB, 5*time.Second)
	for _, th := range threads {
		if err := b.Tick(ctx, th); err != nil {
			t.Fatal(err)
		}
	}
	if got := repB.answers(); len(got) != 0 {
		t.Errorf("the replica that looked at the threads afterwards showed %q, want nothing again", got)
	}
}

// TestShownRecordedWithoutAnotherStep: what a replica showed in threads
// that see no further step is recorded all the same, by its writer, each
// thread's once.
func TestShownRecordedWithoutAnotherStep(t *testing.T) {
	defer runner.SetRecordAfter(20 * time.Millisecond)()
	ctx := context.Background()
	w, batches := batchedWorld(t)
	rep := &recorder{}
	a, store := w.service(t, rep, 5*time.Second)
	const n = 8
	threads := answerThreads(t, a, rep, n)
	for _, th := range threads {
		for {
			got, err := store.ClaimValues(ctx, th, []string{"answered"})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := got["answered"]; ok {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	calls, recorded := batches.recorded()
	for _, th := range threads {
		if recorded[th] != 1 {
			t.Errorf("%s's answer was written %d times, want once", th, recorded[th])
		}
	}
	if calls > n {
		t.Errorf("%d writes for %d threads, want at most one each", calls, n)
	}
}

// TestShownRecordedOnceWhileFlushedAtOnce: threads answered at the same
// time, recorded by the writer every millisecond and by FlushRecords
// (a stopping process) meanwhile: each thread's answer is written once,
// and none is lost.
func TestShownRecordedOnceWhileFlushedAtOnce(t *testing.T) {
	defer runner.SetRecordAfter(time.Millisecond)()
	ctx := context.Background()
	w, batches := batchedWorld(t)
	a, store := w.service(t, &recorder{}, 5*time.Second)
	const n = 24
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			th := fmt.Sprintf("th-%d", i)
			if err := a.Start(ctx, runner.StartRequest{Thread: th, Requester: "U_ALICE", Text: "chat: hello"}); err != nil {
				t.Error(err)
			}
			if i%4 == 0 {
				if err := a.FlushRecords(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := a.FlushRecords(ctx); err != nil {
		t.Fatal(err)
	}
	_, recorded := batches.recorded()
	for i := range n {
		th := fmt.Sprintf("th-%d", i)
		if recorded[th] != 1 {
			t.Errorf("%s's answer was written %d times, want once", th, recorded[th])
		}
		if got, err := store.ClaimValues(ctx, th, []string{"answered"}); err != nil || len(got) != 1 {
			t.Errorf("%s: answered = %q, %v; want it recorded", th, got, err)
		}
	}
}
