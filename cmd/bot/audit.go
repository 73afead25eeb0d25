package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// auditFields are shown first, in this order; any others follow sorted.
var auditFields = []string{"decision", "by", "thread", "call", "tool", "hash", "reason", "attempted", "args", "edited_args"}

func runAudit(ctx context.Context, args []string, e env) error {
	fs := flags("audit", "audit [--thread ID] [--since 24h|2006-01-02T15:04:05Z] [--limit N] [--json]", e)
	thread := fs.String("thread", "", "only this thread's records")
	since := fs.String("since", "", "only records since then: a duration back from now (90m, 24h) or an RFC 3339 time")
	limit := fs.Int("limit", 100, "at most this many records, newest first")
	asJSON := fs.Bool("json", false, "print one JSON object per line (for log shippers)")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	var from time.Time
	if *since != "" {
		if d, err := time.ParseDuration(*since); err == nil {
			from = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, *since); err == nil {
			from = t
		} else {
			return fmt.Errorf("audit: --since %q is neither a duration (24h) nor an RFC 3339 time", *since)
		}
	}
	store, closeStore, err := operatorStore(ctx, e, "audit")
	if err != nil {
		return err
	}
	defer closeStore()
	// Read past the limit so that filters still find enough records.
	recs, err := store.AuditLog(ctx, max(*limit, 1)*10)
	if err != nil {
		return err
	}
	shown := 0
	for _, rec := range recs {
		at := auditTime(rec["id"])
		if !from.IsZero() && at.Before(from) {
			break // newest first: the rest are older
		}
		if *thread != "" && rec["thread"] != *thread {
			continue
		}
		if shown == *limit {
			break
		}
		shown++
		rec["time"] = at.UTC().Format(time.RFC3339Nano)
		delete(rec, "id")
		if *asJSON {
			if err := writeJSONLine(e, rec); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(e.stdout, auditLine(rec))
	}
	if shown == 0 && !*asJSON {
		fmt.Fprintln(e.stdout, "No audit records match.")
	}
	return nil
}

// auditTime is the time of a stream entry ID ("1700000000000-0").
func auditTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// auditLine shows a record on one line: its time, then its fields.
func auditLine(rec map[string]string) string {
	parts := []string{rec["time"]}
	seen := map[string]bool{"time": true, "at": true}
	for _, k := range auditFields {
		if v := rec[k]; v != "" {
			parts = append(parts, k+"="+strconv.Quote(oneLine(v, 200)))
		}
		seen[k] = true
	}
	var rest []string
	for k := range rec {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		parts = append(parts, k+"="+strconv.Quote(oneLine(rec[k], 200)))
	}
	return strings.Join(parts, " ")
}

func writeJSONLine(e env, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.stdout, string(b))
	return err
}
