package cyclebench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Plan says what to measure.
type Plan struct {
	// Warmup cycles (turn 1, new threads) run before measuring.
	Warmup int
	// Cycles is how many turn-1 cycles on new threads the "cycles" phase
	// measures; 0 skips the phase.
	Cycles int
	// History is the last turn of the "hist" phase, which grows Reps
	// conversations turn by turn and measures the cycles at turns 1, 10,
	// 50 and History; 0 skips the phase.
	History int
	// Reps is how many conversations the "hist" phase grows.
	Reps int
	// Unseen is how many conversations the "unseen" phase grows to turn
	// History-1 and then measures at turn History through another
	// Cycler on the same Redis — another replica, which has to read each
	// conversation once; 0 skips the phase.
	Unseen int
}

// Result is the stats of one phase at one turn.
type Result struct {
	Impl  Impl
	Phase string
	Hist  int
	Stats
	// ServerCPU and Runs are, per cycle, the Redis server's CPU time and
	// the commands it ran in all (scripts' own included), from INFO
	// before and after the phase's cycles: work the server did for other
	// cycles meanwhile (a record written in the background) counts too.
	// CPU is this process's CPU time per cycle over the same span, its
	// background work included.
	ServerCPU, CPU time.Duration
	Runs           float64
}

// Summary is the result's line in the Eino comparison program's format.
func (r Result) Summary() string {
	return fmt.Sprintf("%s cpu_us=%.1f srv_us=%.1f run=%.1f", r.Stats.Summary(r.Impl, r.Phase, r.Hist), float64(r.CPU)/1e3, float64(r.ServerCPU)/1e3, r.Runs)
}

// mark is what the server and this process had done when a phase's
// cycles began.
type mark struct {
	server ServerCounts
	cpu    time.Duration
}

func markNow(ctx context.Context, rdb *redis.Client) (mark, error) {
	sc, err := ReadServer(ctx, rdb)
	return mark{server: sc, cpu: ProcessCPU()}, err
}

// result is the Result of a phase's samples, with what the server and
// this process did for them since before.
func result(ctx context.Context, rdb *redis.Client, impl Impl, phase string, hist int, samples []Sample, before mark) (Result, error) {
	cpu := ProcessCPU()
	after, err := ReadServer(ctx, rdb)
	if err != nil {
		return Result{}, err
	}
	r := Result{Impl: impl, Phase: phase, Hist: hist, Stats: Summarize(samples)}
	r.ServerCPU, r.Runs = perCycle(before.server, after, len(samples))
	if len(samples) > 0 {
		r.CPU = (cpu - before.cpu) / time.Duration(len(samples))
	}
	return r, nil
}

// Marks are the turns the "hist" phase reports, up to history.
func Marks(history int) []int {
	marks := []int{1, 10, 50, history}
	slices.Sort(marks)
	marks = slices.Compact(marks)
	return slices.DeleteFunc(marks, func(k int) bool { return k < 1 || k > history })
}

// Run measures impl as plan says, with its data under prefix in rdb (a
// client that m meters), and calls report with each result as it is
// ready. It deletes its keys afterwards.
func Run(ctx context.Context, impl Impl, rdb *redis.Client, m *Meter, prefix string, plan Plan, report func(Result)) (err error) {
	c, err := New(impl, rdb, prefix)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := Cleanup(context.WithoutCancel(ctx), rdb, prefix); err == nil {
			err = cerr
		}
	}()
	for i := range plan.Warmup {
		if _, err := c.Cycle(ctx, fmt.Sprintf("warm/%d", i)); err != nil {
			return err
		}
	}
	if plan.Cycles > 0 {
		before, err := markNow(ctx, rdb)
		if err != nil {
			return err
		}
		samples := make([]Sample, 0, plan.Cycles)
		for i := range plan.Cycles {
			s, _, err := c.Measure(ctx, m, fmt.Sprintf("cycle/%d", i))
			if err != nil {
				return err
			}
			samples = append(samples, s)
		}
		r, err := result(ctx, rdb, impl, "cycles", 1, samples, before)
		if err != nil {
			return err
		}
		report(r)
	}
	if plan.History > 0 {
		marks := Marks(plan.History)
		at := map[int][]Sample{}
		for turn := 1; turn <= plan.History; turn++ {
			measured := slices.Contains(marks, turn)
			before, err := markNow(ctx, rdb)
			if err != nil {
				return err
			}
			for j := range max(plan.Reps, 1) {
				thread := fmt.Sprintf("hist/%d", j)
				if !measured {
					if _, err := c.Cycle(ctx, thread); err != nil {
						return err
					}
					continue
				}
				s, _, err := c.Measure(ctx, m, thread)
				if err != nil {
					return err
				}
				at[turn] = append(at[turn], s)
			}
			if measured {
				r, err := result(ctx, rdb, impl, "hist", turn, at[turn], before)
				if err != nil {
					return err
				}
				report(r)
			}
		}
	}
	if plan.History > 0 && plan.Unseen > 0 {
		for j := range plan.Unseen {
			for range plan.History - 1 {
				if _, err := c.Cycle(ctx, fmt.Sprintf("unseen/%d", j)); err != nil {
					return err
				}
			}
		}
		// The replica that grew them has recorded what it showed, as it
		// does within a second of showing it (runner.Service.FlushRecords):
		// a person's reply comes later than that.
		if err := c.Settle(ctx); err != nil {
			return err
		}
		other, err := New(impl, rdb, prefix)
		if err != nil {
			return err
		}
		// A replica that has been serving other threads.
		for i := range plan.Warmup {
			if _, err := other.Cycle(ctx, fmt.Sprintf("other/warm/%d", i)); err != nil {
				return err
			}
		}
		before, err := markNow(ctx, rdb)
		if err != nil {
			return err
		}
		samples := make([]Sample, 0, plan.Unseen)
		for j := range plan.Unseen {
			thread := fmt.Sprintf("unseen/%d", j)
			other.Adopt(thread, plan.History-1)
			s, _, err := other.Measure(ctx, m, thread)
			if err != nil {
				return err
			}
			samples = append(samples, s)
		}
		r, err := result(ctx, rdb, impl, "unseen", plan.History, samples, before)
		if err != nil {
			return err
		}
		report(r)
	}
	return nil
}

// Cleanup deletes every key under prefix: those that start with it, and
// those whose hash tag does (the audit chain's head, "{prefix:audit}:head").
func Cleanup(ctx context.Context, rdb *redis.Client, prefix string) error {
	var batch []string
	for _, match := range []string{prefix + ":*", "{" + prefix + ":*"} {
		iter := rdb.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 1000 {
				if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
	}
	if len(batch) > 0 {
		return rdb.Unlink(ctx, batch...).Err()
	}
	return nil
}
