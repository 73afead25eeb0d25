package redisstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
)

// BenchmarkCheckpointSave measures one checkpoint save of a conversation
// that has 10, 100 or 1000 messages: one new message and a new agent state,
// as after a superstep. Saves alternate with raw SETs that write as many
// bytes to the same connection, timed the same way, so that the ratio
// x-raw-set compares the two under the same conditions. Metrics:
//
//	ns/op       time of one save
//	x-raw-set   time of a save / time of a raw SET of the same bytes (target ≤ 2)
//	bytes/save  bytes written to the Redis connection per save
//	ns/raw-set  time of one raw SET
//
// A conversation is replaced by a fresh one of the same size after as many
// saves as it had messages, so it stays between 1× and 2× its size.
func BenchmarkCheckpointSave(b *testing.B) {
	for _, size := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("messages=%d", size), func(b *testing.B) {
			benchmarkSave(b, size)
		})
	}
}

func benchmarkSave(b *testing.B, size int) {
	ctx := context.Background()
	var written atomic.Int64
	rdb := countingClient(b, &written)
	store := redisstore.New(rdb, redisstore.Options{})

	var threads []string
	start := func() *conversation {
		c := newConversation(uniqueName("bench"), size)
		mustSave(b, store, c.head)
		threads = append(threads, c.head.Thread)
		return c
	}
	b.Cleanup(func() {
		for _, th := range threads {
			store.Delete(ctx, th)
		}
	})

	// Warm up (script cached, connection open) and find how many bytes a
	// save writes, then size the raw SET's value to write as many.
	conv := start()
	mustSave(b, store, conv.next())
	w0 := written.Load()
	mustSave(b, store, conv.next())
	saveSize := written.Load() - w0

	setKey := uniqueName("bench-raw-set")
	b.Cleanup(func() { rdb.Del(ctx, setKey) })
	value := bytes.Repeat([]byte("x"), int(saveSize))
	w0 = written.Load()
	if err := rdb.Set(ctx, setKey, value, 0).Err(); err != nil {
		b.Fatal(err)
	}
	setOverhead := written.Load() - w0 - saveSize
	value = value[:saveSize-setOverhead]

	var saveTime, setTime time.Duration
	var saveBytes, saves int64
	for b.Loop() {
		if conv.added >= size {
			store.Delete(ctx, conv.head.Thread)
			conv = start()
		}
		cp := conv.next()

		if saves%2 == 0 { // alternate the order, so neither gains from following the other
			saveTime += timeSave(b, store, cp, &written, &saveBytes)
			setTime += timeSet(b, rdb, setKey, value)
		} else {
			setTime += timeSet(b, rdb, setKey, value)
			saveTime += timeSave(b, store, cp, &written, &saveBytes)
		}
		saves++
	}
	b.ReportMetric(float64(saveTime.Nanoseconds())/float64(saves), "ns/op")
	b.ReportMetric(float64(setTime.Nanoseconds())/float64(saves), "ns/raw-set")
	b.ReportMetric(float64(saveTime)/float64(setTime), "x-raw-set")
	b.ReportMetric(float64(saveBytes)/float64(saves), "bytes/save")
}

// timeSave saves cp, adds the bytes it wrote to *sent, and returns how long
// it took.
func timeSave(b *testing.B, store *redisstore.Store, cp *graph.Checkpoint, written *atomic.Int64, sent *int64) time.Duration {
	w0 := written.Load()
	t0 := time.Now()
	if err := store.Save(context.Background(), cp); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	*sent += written.Load() - w0
	return d
}

// timeSet sets key to value and returns how long it took.
func timeSet(b *testing.B, rdb *redis.Client, key string, value []byte) time.Duration {
	t0 := time.Now()
	if err := rdb.Set(context.Background(), key, value, 0).Err(); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// conversation builds the checkpoints of an agent conversation: its head and
// the ones that follow it, each adding one message.
type conversation struct {
	head  *graph.Checkpoint
	added int // messages added since the conversation was made
}

// newConversation returns a conversation whose first checkpoint (head, not
// saved yet) holds size messages.
func newConversation(thread string, size int) *conversation {
	c := &conversation{head: &graph.Checkpoint{
		Version: graph.SchemaVersion,
		Thread:  thread,
		ID:      "cp-1",
		Seq:     1,
		Status:  graph.Running,
		Next:    []string{"model"},
		Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}}
	for i := range size {
		c.head.Journal = append(c.head.Journal, message(i))
	}
	c.head.JournalLen = size
	c.head.State = agentState(size)
	return c
}

// next returns the checkpoint after the head with one more message, and
// makes it the head.
func (c *conversation) next() *graph.Checkpoint {
	prev := c.head
	n := prev.JournalLen
	cp := &graph.Checkpoint{
		Version:     graph.SchemaVersion,
		Thread:      prev.Thread,
		ID:          fmt.Sprintf("cp-%d", prev.Seq+1),
		Parent:      prev.ID,
		Seq:         prev.Seq + 1,
		Step:        prev.Step + 1,
		Status:      graph.Running,
		Next:        []string{"tools"},
		State:       agentState(n + 1),
		JournalFrom: n,
		JournalLen:  n + 1,
		Journal:     []json.RawMessage{message(n)},
		Created:     prev.Created.Add(time.Second),
	}
	c.head = cp
	c.added++
	return cp
}

// message returns the i-th message of a conversation: user requests,
// assistant tool calls and tool results of 200–400 bytes.
func message(i int) json.RawMessage {
	type toolCall struct {
		ID        string `json:"id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type msg struct {
		Role       string     `json:"role"`
		Content    string     `json:"content,omitempty"`
		ToolCalls  []toolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
		Name       string     `json:"name,omitempty"`
	}
	var m msg
	switch i % 3 {
	case 0:
		m = msg{Role: "user", Content: fmt.Sprintf("Message %d: could you check whether the deploy of the billing service finished, and if the health endpoint reports any failing dependency, open an incident and tell me which one it is and since when it has been failing?", i)}
	case 1:
		m = msg{Role: "assistant", Content: "I'll check the service's health endpoint first.", ToolCalls: []toolCall{{
			ID:        fmt.Sprintf("call_%08d", i),
			Name:      "http_request",
			Arguments: `{"method":"GET","url":"https://api.example.com/billing/health","headers":{"Accept":"application/json"}}`,
		}}}
	case 2:
		m = msg{Role: "tool", ToolCallID: fmt.Sprintf("call_%08d", i-1), Name: "http_request", Content: `{"status":200,"body":"{\"status\":\"degraded\",\"checks\":{\"db\":\"ok\",\"queue\":\"failing since 2025-01-02T03:04:05Z\",\"cache\":\"ok\"},\"version\":\"1.42.0\"}"}`}
	}
	b, _ := json.Marshal(m)
	return b
}

// agentState returns an agent's state without its messages.
func agentState(messages int) json.RawMessage {
	return fmt.Appendf(nil, `{"turn":%d,"user":"U012ABCDEF","channel":"C0123456789","calls":[{"id":"call_%08d","tool":"http_request","status":"approved","decided_by":"U0BOBBOBBO"}]}`, messages/3, messages)
}
