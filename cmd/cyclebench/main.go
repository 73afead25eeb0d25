// Command cyclebench measures Countersign's approval cycle against a Redis
// server and prints one SUMMARY line per measurement, in the format of
// the CloudWeGo Eino comparison program, so that a script can set the two
// side by side (.ci/perf-vs-eino):
//
//	cyclebench -redis redis://127.0.0.1:6379/0 -cycles 2000 -history 100
//
// It measures through the agent and the store alone (impl=agent) and
// through the bot's own wiring, bot.New (impl=runner): a "cycles" phase
// of turn-1 cycles on new threads; a "hist" phase that grows
// conversations to -history turns and reports turns 1, 10, 50 and
// -history; and an "unseen" phase that measures turn -history of other
// conversations through another Cycler on the same Redis (for the
// runner, another bot.New: another replica, which has not seen them and
// reads each once). Bytes are counted on the client's connection (in_B:
// written to Redis, out_B: read from it), round trips (rt) and commands
// (cmds; a script is one) by a go-redis hook. Its keys live under a
// prefix of their own and are deleted afterwards. See the cyclebench
// package for the workload.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/internal/cyclebench"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cyclebench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cyclebench", flag.ContinueOnError)
	redisURL := fs.String("redis", "redis://127.0.0.1:6379/0", "Redis URL")
	cycles := fs.Int("cycles", 2000, "measured turn-1 cycles, each on a new thread")
	warmup := fs.Int("warmup", 200, "warm-up cycles before measuring")
	history := fs.Int("history", 100, "turns of the history-growth phase")
	reps := fs.Int("reps", 50, "conversations grown in the history phase (cycles measured per mark)")
	unseen := fs.Int("unseen", -1, "conversations measured at turn -history by another replica, which has not seen them (default -reps; 0: none)")
	impls := fs.String("impl", "agent,runner", "what to measure: agent, runner, or both")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	opts, err := redis.ParseURL(*redisURL)
	if err != nil {
		return err
	}
	m := new(cyclebench.Meter)
	m.Instrument(opts)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	rdb.AddHook(m)
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", opts.Addr, err)
	}
	fmt.Printf("countersign cyclebench | %s %s/%s GOMAXPROCS=%d | redis %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), opts.Addr)
	if *unseen < 0 {
		*unseen = *reps
	}
	plan := cyclebench.Plan{Warmup: *warmup, Cycles: *cycles, History: *history, Reps: *reps, Unseen: *unseen}
	for _, impl := range strings.Split(*impls, ",") {
		impl := cyclebench.Impl(strings.TrimSpace(impl))
		if impl != cyclebench.Agent && impl != cyclebench.Runner {
			return fmt.Errorf("unknown -impl %q", impl)
		}
		prefix := fmt.Sprintf("cyclebench:%d", time.Now().UnixNano())
		err := cyclebench.Run(ctx, impl, rdb, m, prefix, plan, func(r cyclebench.Result) {
			fmt.Printf("  %-6s %-6s turn %3d: %8.0f cycles/s  p50 %7.3f ms  p99 %7.3f ms  %5.2f commands  %5.2f round trips  %7.0f B written  %7.0f B read  CPU %5.0f µs  Redis: %5.0f µs CPU, %5.1f run in all\n",
				r.Impl, r.Phase, r.Hist, r.CPS, float64(r.P50)/1e6, float64(r.P99)/1e6, r.Commands, r.RoundTrips, r.Written, r.Read, float64(r.CPU)/1e3, float64(r.ServerCPU)/1e3, r.Runs)
			fmt.Println(r.Summary())
		})
		if err != nil {
			return err
		}
	}
	return nil
}
