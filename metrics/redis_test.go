package metrics

import (
	"bufio"
	"context"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The bytes a command is counted for are those go-redis sends, whatever
// the kind of its arguments, the integers a save sends included.
func TestCommandSizeCountsWhatIsSent(t *testing.T) {
	t.Parallel()
	str, seq := "a field's value", int64(1234567)
	args := []any{"evalsha", "0123456789abcdef", 5, int64(-12), []byte("{\"v\":2}"), 0, int64(math.MaxInt64),
		int64(math.MinInt64), math.MinInt, 3.5, true, nil, time.Second, uint8(7), &str, &seq}
	want := 1 + len(strconv.Itoa(len(args))) + 2
	for _, a := range args {
		s := argString(a)
		want += 1 + len(strconv.Itoa(len(s))) + 2 + len(s) + 2
	}
	if got := commandSize(args); got != want {
		t.Errorf("commandSize = %d, want %d", got, want)
	}
	for _, a := range args {
		if got, want := argLen(a), len(argString(a)); got != want {
			t.Errorf("argLen(%#v) = %d, want %d", a, got, want)
		}
	}
	if got := sentBy(t, args); got != want {
		t.Errorf("go-redis sent %d bytes, commandSize counted %d", got, want)
	}
}

// digits is the length strconv writes, at every power of ten and
// either side of it.
func TestDigits(t *testing.T) {
	t.Parallel()
	check := func(n int64) {
		if got, want := digits(n), len(strconv.FormatInt(n, 10)); got != want {
			t.Errorf("digits(%d) = %d, want %d", n, got, want)
		}
	}
	check(math.MaxInt64)
	check(math.MinInt64)
	for p := int64(1); p > 0 && p <= math.MaxInt64/10; p *= 10 {
		for _, n := range []int64{p - 1, p, p + 1, 10*p - 1} {
			check(n)
			check(-n)
		}
	}
}

// sentBy is how many bytes go-redis writes for a command of args: it
// sends it to a listener that reads RESP arrays of bulk strings, refuses
// the client's handshake (as a server without HELLO does) and answers
// the command +OK.
func sentBy(t *testing.T, args []any) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int, 1)
	go func() {
		defer close(got)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		for {
			n, first, ok := readCommand(r)
			if !ok {
				return
			}
			if strings.EqualFold(first, "hello") {
				_, _ = conn.Write([]byte("-ERR unknown command 'HELLO'\r\n"))
				continue
			}
			got <- n
			_, _ = conn.Write([]byte("+OK\r\n"))
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("Do: %v", err)
	}
	return <-got
}

// readCommand reads one RESP array of bulk strings: its size in bytes,
// its first element, and whether it was read whole.
func readCommand(r *bufio.Reader) (n int, first string, ok bool) {
	line := func() (int, bool) {
		l, err := r.ReadString('\n')
		n += len(l)
		if err != nil || len(l) < 3 {
			return 0, false
		}
		v, err := strconv.Atoi(l[1 : len(l)-2])
		return v, err == nil
	}
	count, ok := line()
	for i := 0; ok && i < count; i++ {
		var size int
		if size, ok = line(); !ok {
			break
		}
		b := make([]byte, size+2)
		_, err := io.ReadFull(r, b)
		n, ok = n+len(b), err == nil
		if i == 0 {
			first = string(b[:size])
		}
	}
	return n, first, ok
}

// A command is counted under its operation, whether the operation was
// named at the start or is first met with it, and a pipeline is one
// round trip.
func TestRedisCostCountsByOperation(t *testing.T) {
	t.Parallel()
	op := func(cmd redis.Cmder) string { return cmd.Args()[0].(string) }
	cost := NewRedisCost(op, "get", "set")
	m := New(nil, Options{Redis: cost})
	ctx := context.Background()
	done := func(context.Context, redis.Cmder) error { return nil }
	doneAll := func(context.Context, []redis.Cmder) error { return nil }
	process, pipeline := cost.ProcessHook(done), cost.ProcessPipelineHook(doneAll)
	for _, cmd := range []redis.Cmder{redis.NewStringCmd(ctx, "get", "k"), redis.NewStringCmd(ctx, "get", "k"), redis.NewIntCmd(ctx, "hlen", "h")} {
		if err := process(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	if err := pipeline(ctx, []redis.Cmder{redis.NewStatusCmd(ctx, "set", "k", "v"), redis.NewIntCmd(ctx, "hlen", "h")}); err != nil {
		t.Fatal(err)
	}
	// A transaction is labelled by what it runs, not by its MULTI.
	tx := []redis.Cmder{redis.NewStatusCmd(ctx, "multi"), redis.NewIntCmd(ctx, "hlen", "h"), redis.NewSliceCmd(ctx, "exec")}
	if err := pipeline(ctx, tx); err != nil {
		t.Fatal(err)
	}

	page := scrape(t, m)
	for _, want := range []string{
		`countersign_redis_commands_total{op="get"} 2`,
		`countersign_redis_round_trips_total{op="get"} 2`,
		`countersign_redis_commands_total{op="hlen"} 3`,
		`countersign_redis_round_trips_total{op="hlen"} 2`,
		`countersign_redis_commands_total{op="set"} 1`,
		`countersign_redis_round_trips_total{op="set"} 1`,
		// "get" "k": *2\r\n$3\r\nget\r\n$1\r\nk\r\n, twice.
		`countersign_redis_bytes_total{direction="sent",op="get"} 40`,
	} {
		if !strings.Contains(page, "\n"+want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(page, `countersign_redis_round_trips_total{op="multi"} 1`) {
		t.Error("a transaction's round trip is labelled by its MULTI")
	}
}

// BenchmarkRedisCostHook is what the hook adds to each command the bot
// sends: a script with a save's arguments, and its reply.
func BenchmarkRedisCostHook(b *testing.B) {
	ops := []string{"save", "load", "claim", "lease", "audit", "inbox", "intake", "schedule", "other"}
	cost := NewRedisCost(func(redis.Cmder) string { return "save" }, ops...)
	New(nil, Options{Redis: cost})
	ctx := context.Background()
	process := cost.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	cmd := redis.NewCmd(ctx, "evalsha", "0123456789abcdef0123456789abcdef01234567", 3,
		"{t}:head", "{t}:journal", "{t}:lease", "01HZX", 7, make([]byte, 1200), "owner:0123456789abcdef")
	cmd.SetVal([]any{int64(1), "01HZX"})
	b.ReportAllocs()
	for b.Loop() {
		_ = process(ctx, cmd)
	}
}
