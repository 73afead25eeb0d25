package metrics

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// RedisCost counts what the bot asks of Redis — commands, round trips and
// bytes each way — by operation. It is a go-redis hook: add it to the
// client (on a cluster, to each node client, with OnNewNode) before the
// client is used, and hand it to New in Options.Redis to export it. It
// is safe for concurrent use.
type RedisCost struct {
	op         func(redis.Cmder) string
	commands   *prometheus.CounterVec
	roundTrips *prometheus.CounterVec
	bytes      *prometheus.CounterVec
	// known holds the counters of the operations named at the start,
	// and series (*opSeries) those of others, made when first met:
	// looked up once each, as the hook runs for every command. known is
	// only read once NewRedisCost has returned.
	known  map[string]*opSeries
	series sync.Map
}

// opSeries are the counters of one operation.
type opSeries struct {
	commands, roundTrips, sent, received prometheus.Counter
}

// NewRedisCost returns a RedisCost whose operation label of a command is
// op(cmd); ops are the labels whose series exist from the start.
func NewRedisCost(op func(redis.Cmder) string, ops ...string) *RedisCost {
	c := &RedisCost{
		op: op,
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_redis_commands_total",
			Help: "Redis commands the bot sent, by operation; a script is one command.",
		}, []string{"op"}),
		roundTrips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_redis_round_trips_total",
			Help: "Round trips to Redis, by operation: a command, a script or a whole pipeline is one.",
		}, []string{"op"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "countersign_redis_bytes_total",
			Help: "Bytes of Redis commands sent and replies received, as RESP2 encodes them, by operation and direction.",
		}, []string{"op", "direction"}),
	}
	c.known = make(map[string]*opSeries, len(ops))
	for _, o := range ops {
		c.known[o] = c.newSeries(o)
	}
	return c
}

// of returns op's counters, making its series if they do not exist yet.
func (c *RedisCost) of(op string) *opSeries {
	if s, ok := c.known[op]; ok {
		return s
	}
	if s, ok := c.series.Load(op); ok {
		return s.(*opSeries)
	}
	s, _ := c.series.LoadOrStore(op, c.newSeries(op))
	return s.(*opSeries)
}

// newSeries makes op's series, at zero.
func (c *RedisCost) newSeries(op string) *opSeries {
	return &opSeries{
		commands:   c.commands.WithLabelValues(op),
		roundTrips: c.roundTrips.WithLabelValues(op),
		sent:       c.bytes.WithLabelValues(op, "sent"),
		received:   c.bytes.WithLabelValues(op, "received"),
	}
}

// DialHook implements redis.Hook.
func (c *RedisCost) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: one command, one round trip.
func (c *RedisCost) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		s := c.of(c.op(cmd))
		s.roundTrips.Inc()
		s.count(cmd)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook: a pipeline is one round trip,
// labelled by its first command that is not a WAIT, MULTI or EXEC (a
// transaction is labelled by what it runs).
func (c *RedisCost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		trip := ""
		for _, cmd := range cmds {
			op := c.op(cmd)
			switch cmd.Name() {
			case "wait", "multi", "exec":
			default:
				if trip == "" {
					trip = op
				}
			}
			c.of(op).count(cmd)
		}
		c.of(cmp.Or(trip, "other")).roundTrips.Inc()
		return err
	}
}

func (s *opSeries) count(cmd redis.Cmder) {
	s.commands.Inc()
	s.sent.Add(float64(commandSize(cmd.Args())))
	s.received.Add(float64(replySize(cmd)))
}

// commandSize is the size of a command as RESP sends it: an array of
// bulk strings.
func commandSize(args []any) int {
	n := headerSize(len(args))
	for _, a := range args {
		// Most arguments are strings, or pointers to them (a save's):
		// those are looked at first, before argLen's type switch.
		var l int
		if s, ok := a.(string); ok {
			l = len(s)
		} else if p, ok := a.(*string); ok {
			l = len(*p)
		} else {
			l = argLen(a)
		}
		n += headerSize(l) + l + 2
	}
	return n
}

// headerSize is the size of a RESP header such as "*3\r\n".
func headerSize(n int) int { return 1 + digits(int64(n)) + 2 }

// digits is the length of n in decimal.
// The lengths a command's header and most of its arguments have, up
// to four digits, are found by comparing, not dividing.
func digits(n int64) int {
	d, u := 1, uint64(n)
	if n < 0 {
		d, u = 2, -u
	}
	switch {
	case u < 10:
		return d
	case u < 100:
		return d + 1
	case u < 1000:
		return d + 2
	}
	for d += 3; u >= 10000; u /= 10 {
		d++
	}
	return d
}

// argLen is len(argString(a)), without building the string for the
// arguments a save sends: strings, bytes and integers, and pointers to
// strings and integers (redisstore passes a script's many strings so,
// to spare an allocation for each).
func argLen(a any) int {
	switch v := a.(type) {
	case string:
		return len(v)
	case *string:
		return len(*v)
	case []byte:
		return len(v)
	case int:
		return digits(int64(v))
	case int64:
		return digits(v)
	case *int64:
		return digits(*v)
	}
	return len(argString(a))
}

// argString is an argument as go-redis writes it.
func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case *string:
		return *v
	case *int64:
		return strconv.FormatInt(*v, 10)
	case []byte:
		return string(v)
	case time.Time:
		return v.Format(time.RFC3339Nano)
	case time.Duration:
		return strconv.FormatInt(v.Nanoseconds(), 10)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case nil:
		return ""
	}
	return fmt.Sprint(a)
}

// replySize is the size of a command's reply as RESP2 encodes it: exact
// for the reply types the bot reads, an estimate from its printed value
// for others. An error reply counts its message.
func replySize(cmd redis.Cmder) int {
	if err := cmd.Err(); err != nil && err != redis.Nil {
		return len(err.Error()) + 3
	}
	switch c := cmd.(type) {
	case *redis.Cmd:
		return valueSize(c.Val())
	case *redis.StringCmd:
		return stringSize(c.Val())
	case *redis.IntCmd:
		return valueSize(c.Val())
	case *redis.BoolCmd, *redis.StatusCmd:
		return 5
	case *redis.SliceCmd:
		return valueSize(c.Val())
	case *redis.StringSliceCmd:
		n := headerSize(len(c.Val()))
		for _, s := range c.Val() {
			n += stringSize(s)
		}
		return n
	case *redis.MapStringStringCmd:
		n := headerSize(2 * len(c.Val()))
		for k, v := range c.Val() {
			n += stringSize(k) + stringSize(v)
		}
		return n
	}
	return len(cmd.String())
}

// valueSize is the RESP2 size of a reply value.
func valueSize(v any) int {
	switch v := v.(type) {
	case nil:
		return 5 // $-1\r\n
	case string:
		return stringSize(v)
	case int64:
		return 3 + digits(v)
	case []any:
		n := headerSize(len(v))
		for _, e := range v {
			n += valueSize(e)
		}
		return n
	case []string:
		n := headerSize(len(v))
		for _, e := range v {
			n += stringSize(e)
		}
		return n
	}
	return stringSize(fmt.Sprint(v))
}

// stringSize is the RESP2 size of a bulk string. It takes a string, not
// an any: a string made an any is a copy of its header on the heap, and
// a thread's journal, read whole, is hundreds of them.
func stringSize(s string) int {
	return headerSize(len(s)) + len(s) + 2
}
