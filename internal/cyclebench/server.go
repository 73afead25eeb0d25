package cyclebench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerCounts is what the Redis server says it has done so far: the
// CPU time it has used (INFO cpu: user and system) and the commands it
// has run (INFO commandstats: every command, those scripts run
// included, and each script once more).
type ServerCounts struct {
	CPU  time.Duration
	Runs int64
}

// ReadServer reads the server's counts. The readings themselves count:
// one INFO before and one after a phase cost the server a few
// microseconds and two commands, spread over the phase's cycles.
func ReadServer(ctx context.Context, rdb *redis.Client) (ServerCounts, error) {
	info, err := rdb.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return ServerCounts{}, err
	}
	return parseServer(info)
}

// parseServer reads ServerCounts from the text of INFO cpu and
// commandstats.
func parseServer(info string) (ServerCounts, error) {
	var sc ServerCounts
	for _, line := range strings.Split(info, "\r\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_user" || name == "used_cpu_sys":
			s, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return ServerCounts{}, fmt.Errorf("INFO cpu %s: %w", name, err)
			}
			sc.CPU += time.Duration(s * float64(time.Second))
		case strings.HasPrefix(name, "cmdstat_"):
			calls, _, _ := strings.Cut(strings.TrimPrefix(value, "calls="), ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				return ServerCounts{}, fmt.Errorf("INFO commandstats %s: %w", name, err)
			}
			sc.Runs += n
		}
	}
	return sc, nil
}

// perCycle is what the server did between before and after, per cycle
// of n: its CPU time and the commands it ran.
func perCycle(before, after ServerCounts, n int) (time.Duration, float64) {
	if n <= 0 {
		return 0, 0
	}
	return (after.CPU - before.CPU) / time.Duration(n), float64(after.Runs-before.Runs) / float64(n)
}

// ProcessCPU is the CPU time this process has used so far, user and
// system (the kernel's share of its round trips included), or 0 where
// the system does not say.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
