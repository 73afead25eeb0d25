package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/runner"
)

// Deliveries recorded after a session ended (RecordDeliveries) come in
// batches of several threads: each thread's are written by a script of
// its own (recordLua), and the scripts go in one pipeline, so a batch
// costs one round trip however many threads it holds and a thread that
// fails loses no other's. On a cluster the client sends each node its
// part of the pipeline; the wake-ups, in a slot of their own there, are
// moved by a second pipeline (moveWakeLua) for the threads recorded.

// RecordDeliveries implements runner.Sessions: one pipeline of
// recordLua, which records each thread's deliveries and, on a single
// server, moves its wake-up if it is still the one the thread's WakeSet
// names; on a cluster, a second pipeline then moves them, on the same
// condition.
func (s *Store) RecordDeliveries(ctx context.Context, ds []runner.Deliveries) []error {
	errs := make([]error, len(ds))
	cluster := s.isCluster()
	var calls []scriptCall
	for i, d := range ds {
		tk, err := s.keys(d.Thread)
		if err == nil {
			err = checkClaimKeys(d.Record...)
		}
		if err != nil {
			errs[i] = fmt.Errorf("record deliveries: %w", err)
			continue
		}
		keys := []string{tk.claims, tk.head}
		if !cluster {
			keys = append(keys, s.prefix+":wakeups")
		}
		from, to := wakeMove(d)
		args := make([]any, 0, 6+len(d.Record))
		args = append(args, d.Thread, from, to)
		args = s.recordArgs(args, d.Record, d.Answered)
		calls = append(calls, scriptCall{of: i, keys: keys, args: args})
	}
	s.runEach(ctx, s.recordScript, calls, errs)
	if cluster {
		var moves []scriptCall
		for i, d := range ds {
			if from, to := wakeMove(d); errs[i] == nil && from != "" {
				moves = append(moves, scriptCall{of: i, keys: []string{s.prefix + ":wakeups"}, args: []any{d.Thread, from, to}})
			}
		}
		s.runEach(ctx, s.moveWakeScript, moves, errs)
	}
	if slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		return errs
	}
	return nil
}

// wakeMove returns the wake-up d replaces (unix ms, "": none) and the
// one it puts instead (unix ms, "0": none), as recordLua takes them.
func wakeMove(d runner.Deliveries) (from, to string) {
	if !d.Move {
		return "", "0"
	}
	to = "0"
	if !d.Wake.IsZero() {
		to = unixMs(d.Wake)
	}
	return unixMs(d.WakeSet), to
}

// scriptCall is one run of a script in a pipeline, for the item of
// index of a batch.
type scriptCall struct {
	of   int
	keys []string
	args []any
}

// runEach runs script once per call in one pipeline and sets
// errs[call.of] to each run's error.
//
// The first pipeline of a script on this Store sends its first run by
// the script's source (EVAL), which loads it, and the others by its
// SHA-1: a server that does not have the script yet then refuses none of
// them, where it would refuse the whole batch, each run a failed call.
// When a server refuses runs all the same (NOSCRIPT: it was restarted or
// its scripts flushed since, or on a cluster another node), the script
// is loaded and the runs refused are sent again, in a second pipeline.
func (s *Store) runEach(ctx context.Context, script *redis.Script, calls []scriptCall, errs []error) {
	if len(calls) == 0 {
		return
	}
	_, known := s.ranEach.Load(script.Hash())
	cmds := make([]*redis.Cmd, len(calls))
	// Each command's error is read below; Pipelined's is the first of them.
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, c := range calls {
			if j == 0 && !known {
				cmds[j] = script.Eval(ctx, p, c.keys, c.args...)
			} else {
				cmds[j] = script.EvalSha(ctx, p, c.keys, c.args...)
			}
		}
		return nil
	})
	var unknown []int
	for j, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			unknown = append(unknown, j)
		}
	}
	if !known {
		s.ranEach.Store(script.Hash(), true)
	}
	if len(unknown) > 0 {
		// Loaded once (on every node of a cluster), the script is run
		// by its SHA-1 again; should that fail, by its source.
		loaded := script.Load(ctx, s.rdb).Err() == nil
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, j := range unknown {
				if loaded {
					cmds[j] = script.EvalSha(ctx, p, calls[j].keys, calls[j].args...)
				} else {
					cmds[j] = script.Eval(ctx, p, calls[j].keys, calls[j].args...)
				}
			}
			return nil
		})
	}
	for j, cmd := range cmds {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			errs[calls[j].of] = fmt.Errorf("record deliveries of %s: %w", calls[j].args[0], err)
		}
	}
}
