package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/audit"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/tools"
)

const auditUsage = `usage: bot audit [head|verify|export] [flags]

  bot audit [--thread ID] [--since 24h|7d|RFC3339] [--limit N] [--wide|--json]
                                                                           the newest entries, newest first
  bot audit head                                                           the chain's head, SEQ:HASH, to note elsewhere
  bot audit verify [--file PATH [--format jsonl|csv]] [--head SEQ:HASH]    check the hash chain; exit 1 at a break,
                                                                           or if the chain does not hold that head
  bot audit export [--since 24h|7d|RFC3339] [--after ID] [--format jsonl|csv]
                                                                           entries oldest first, one per line

The trail lives in the Redis of REDIS_URL (unset: the local Redis of the
state directory). verify --file checks an export instead, without Redis.
Whoever can write to Redis can rewrite the chain from some entry on and
recompute its hashes; a head noted elsewhere (bot audit head) and checked
with verify --head shows that.
`

// auditFields are shown first, in this order; any others follow sorted.
var auditFields = []string{"event", "decision", "outcome", "by", "thread", "call", "tool", "args_hash", "hash", "reason", "attempted", "error", "args", "edited_args"}

func runAudit(ctx context.Context, args []string, e env) error {
	if len(args) > 0 {
		switch args[0] {
		case "head":
			return auditHead(ctx, args[1:], e)
		case "verify":
			return auditVerify(ctx, args[1:], e)
		case "export":
			return auditExport(ctx, args[1:], e)
		case "help":
			fmt.Fprint(e.stdout, auditUsage+helpText["audit"])
			return nil
		}
	}
	fs := flags("audit", "audit [head|verify|export] [--thread ID] [--since 24h|7d|2006-01-02T15:04:05Z] [--limit N] [--json]", e)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), auditUsage+"\nflags of the listing:\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), helpText["audit"])
	}
	thread := fs.String("thread", "", "only this thread's records")
	since := fs.String("since", "", "only records since then: a duration back from now (90m, 24h, 7d) or an RFC 3339 time")
	limit := fs.Int("limit", 100, "at most this many records, newest first")
	asJSON := fs.Bool("json", false, "print one JSON object per line (bot audit export writes the whole trail, for log shippers)")
	wide := fs.Bool("wide", false, "print each record whole on one line, every field and full hashes, instead of a table that fits the terminal")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	from, err := parseSince("audit", *since)
	if err != nil {
		return err
	}
	store, closeStore, err := operatorStore(ctx, e, "audit")
	if err != nil {
		return err
	}
	defer closeStore()
	e, flush := escapedTerminal(e)
	defer flush()
	// Read past the limit so that filters still find enough records.
	recs, err := store.AuditLog(ctx, max(*limit, 1)*10)
	if err != nil {
		return err
	}
	shown := 0
	tab := newTable("TIME", "EVENT", "BY", "THREAD", "CALL", "TOOL", "ARGS", "DETAIL").endShrinks(3).shrinks(2, 5, 7)
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
		if *wide {
			fmt.Fprintln(e.stdout, auditLine(rec))
			continue
		}
		tab.add(auditRow(rec, at)...)
	}
	if shown == 0 && !*asJSON {
		fmt.Fprintln(e.stdout, "No audit records match.")
		return nil
	}
	if *asJSON || *wide {
		return nil
	}
	return tab.write(e.stdout, termWidth(e.getenv))
}

// auditRow is a record as a row of the listing: the event says what
// happened (a decision's kind, "refused", "execution", an outcome), hashes
// are shortened, the edited arguments' hash after the model's
// ("a1b2c3d4>e5f6a7b8").
func auditRow(rec map[string]string, at time.Time) []string {
	what := rec["event"]
	switch rec["event"] {
	case "decision":
		what = rec["decision"]
	case "refusal":
		what = "refused"
	case "outcome":
		what = rec["outcome"]
	}
	args := shortHash(rec["args_hash"])
	if h := rec["edited_args_hash"]; h != "" {
		args += ">" + shortHash(h)
	}
	var detail []string
	for _, k := range []string{"reason", "attempted", "error"} {
		if v := rec[k]; v != "" {
			detail = append(detail, k+": "+v)
		}
	}
	cell := func(s string) string { return orNone(oneLine(s, 200)) }
	return []string{at.UTC().Format("01-02 15:04:05"), cell(what), cell(rec["by"]), cell(rec["thread"]),
		cell(rec["call"]), cell(rec["tool"]), orNone(args), cell(strings.Join(detail, "; "))}
}

// parseSince reads a --since flag: a duration back from now (Go's, or
// whole days) or an RFC 3339 time; "" is the zero time.
func parseSince(cmd, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := tools.ParseDuration(s); err == nil {
		return time.Now().Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%s: --since %q is neither a duration (24h, 7d) nor an RFC 3339 time", cmd, s)
}

// auditHead prints the head of the chain in Redis as SEQ:HASH, what
// verify --head checks a trail against.
func auditHead(ctx context.Context, args []string, e env) error {
	if err := parse(flags("audit head", "audit head", e), args, e); err != nil {
		return err
	}
	store, closeStore, err := confirmingStore(ctx, e, "audit head")
	if err != nil {
		return err
	}
	defer closeStore()
	head, err := store.AuditHead(ctx)
	if errors.Is(err, redisstore.ErrNotReplicated) {
		// A head only the master has may be gone after a failover,
		// and the entries after it renumbered: not one to note.
		return fmt.Errorf("audit head: the head in Redis is on its master only (%w); a failover now could lose it, so it is not printed: try again once the replicas have caught up", err)
	}
	if err != nil {
		return fmt.Errorf("audit head: %w", err)
	}
	a, ok := head.Anchor()
	if !ok {
		return errors.New("audit head: the audit trail has no hash-chained entries yet")
	}
	// What Redis holds is printed only if it is a head.
	if _, err := audit.ParseAnchor(a.String()); err != nil {
		return fmt.Errorf("audit head: the head in Redis: %w", err)
	}
	_, err = fmt.Fprintln(e.stdout, a)
	return err
}

// anchorList is the --head flag: anchors, repeated or separated by
// commas.
type anchorList []audit.Anchor

func (l *anchorList) String() string {
	var s []string
	for _, a := range *l {
		s = append(s, a.String())
	}
	return strings.Join(s, ",")
}

func (l *anchorList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		a, err := audit.ParseAnchor(part)
		if err != nil {
			return err
		}
		*l = append(*l, a)
	}
	return nil
}

// auditVerify checks the hash chain of the trail in Redis, or of an
// exported file, and reports the first break as an error; then that the
// chain holds the heads given.
func auditVerify(ctx context.Context, args []string, e env) error {
	fs := flags("audit verify", "audit verify [--file PATH [--format jsonl|csv]] [--head SEQ:HASH]", e)
	file := fs.String("file", "", "verify this export (- for standard input) instead of the trail in Redis")
	format := fs.String("format", "", "the file's format, jsonl or csv (default from its name: .csv is csv, else jsonl)")
	var anchors anchorList
	fs.Var(&anchors, "head", "fail unless the chain holds this `SEQ:HASH`, a head noted before (bot audit head prints it); repeat it for several")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	e, flush := escapedTerminal(e)
	defer flush()
	if *file != "" {
		return verifyFile(*file, *format, anchors, e)
	}
	if *format != "" {
		return errors.New("audit verify: --format is for --file")
	}
	store, closeStore, err := confirmingStore(ctx, e, "audit verify")
	if err != nil {
		return err
	}
	defer closeStore()
	rep, err := store.VerifyAudit(ctx, anchors...)
	if err != nil {
		return verifyFailed(e, rep, err)
	}
	// What was checked, and the head printed, must be what a failover
	// keeps: with REDIS_WAIT_REPLICAS set, the replicas confirm it.
	if err := store.ConfirmAudit(ctx); err != nil {
		return fmt.Errorf("audit verify: the chain checked is on the Redis master only (%w); a failover now could lose its newest entries: try again once the replicas have caught up", err)
	}
	if rep.Entries == 0 && rep.Trimmed == 0 {
		fmt.Fprintln(e.stdout, "OK: the audit trail has no hash-chained entries yet.")
	} else {
		fmt.Fprintf(e.stdout, "OK: %d entries verified (seq %d to %d).\nhead: seq %d, hash %s\n",
			rep.Entries, rep.First, rep.Last.Seq, rep.Last.Seq, rep.Last.Hash)
	}
	if rep.First > 1 {
		fmt.Fprintf(e.stdout, "Entries 1 to %d were trimmed by retention (AUDIT_RETENTION); the oldest kept entry's prev is the anchor.\n", rep.First-1)
	}
	if rep.Before > 0 {
		fmt.Fprintf(e.stdout, "%d older entries carry no hash (written before the trail was chained) and are not covered.\n", rep.Before)
	}
	anchored(e, anchors)
	return nil
}

// anchored says which heads the chain was found to hold.
func anchored(e env, anchors []audit.Anchor) {
	for _, a := range anchors {
		fmt.Fprintf(e.stdout, "The chain holds the head %s.\n", a)
	}
}

func verifyFile(path, format string, anchors []audit.Anchor, e env) error {
	var in io.Reader = e.stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("audit verify: %w", err)
		}
		defer f.Close()
		in = f
	}
	if format == "" {
		format = string(audit.JSONL)
		if strings.EqualFold(filepath.Ext(path), ".csv") {
			format = string(audit.CSV)
		}
	}
	f, err := audit.ParseFormat(format)
	if err != nil {
		return fmt.Errorf("audit verify: %w", err)
	}
	r := audit.NewReader(in, f)
	v := audit.Verifier{Anchors: anchors}
	for {
		entry, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("audit verify: %s: %w", path, err)
		}
		if err := v.Add(entry); err != nil {
			break
		}
	}
	rep, err := v.Finish(nil)
	if err != nil {
		return verifyFailed(e, rep, err)
	}
	if rep.Entries == 0 {
		fmt.Fprintf(e.stdout, "OK: %s has no hash-chained entries.\n", path)
		return nil // with anchors, Finish failed
	}
	fmt.Fprintf(e.stdout, "OK: %d entries verified (seq %d to %d).\nlast: seq %d, hash %s\n",
		rep.Entries, rep.First, rep.Last.Seq, rep.Last.Seq, rep.Last.Hash)
	if rep.First > 1 {
		fmt.Fprintf(e.stdout, "Entries before seq %d are not in the file; the first entry's prev is the anchor.\n", rep.First)
	}
	anchored(e, anchors)
	return nil
}

func verifyFailed(e env, rep audit.Report, err error) error {
	var b *audit.BreakError
	var a *audit.AnchorError
	switch {
	case errors.As(err, &a):
		fmt.Fprintf(e.stdout, "BROKEN: %v\n", a)
	case errors.As(err, &b):
		noun := "entries"
		if rep.Entries == 1 {
			noun = "entry"
		}
		fmt.Fprintf(e.stdout, "BROKEN: %v\n%d %s verified before the break.\n", b, rep.Entries, noun)
	default:
		return fmt.Errorf("audit verify: %w", err)
	}
	return &toldError{fmt.Errorf("audit verify: %w", err)}
}

// auditExport writes the trail, oldest first, one entry per line.
func auditExport(ctx context.Context, args []string, e env) error {
	fs := flags("audit export", "audit export [--since 24h|7d|2006-01-02T15:04:05Z] [--after ID] [--format jsonl|csv]", e)
	since := fs.String("since", "", "only entries since then: a duration back from now (90m, 24h, 7d) or an RFC 3339 time")
	after := fs.String("after", "", "only entries after the one with this id (the last one shipped before)")
	format := fs.String("format", "jsonl", "jsonl (one JSON object per line) or csv")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	from, err := parseSince("audit export", *since)
	if err != nil {
		return err
	}
	f, err := audit.ParseFormat(*format)
	if err != nil {
		return fmt.Errorf("audit export: %w", err)
	}
	if *after != "" && !validStreamID(*after) {
		return fmt.Errorf("audit export: --after %q is not an entry id like 1700000000000-0", *after)
	}
	store, closeStore, err := operatorStore(ctx, e, "audit export")
	if err != nil {
		return err
	}
	defer closeStore()
	w := audit.NewWriter(e.stdout, f)
	last := *after
	for {
		page, err := store.AuditEntries(ctx, last, from, 1000)
		if err != nil {
			return err
		}
		for _, entry := range page {
			if err := w.Write(entry); err != nil {
				return err
			}
		}
		if len(page) == 0 {
			break
		}
		last = page[len(page)-1].ID
	}
	return w.Flush()
}

// validStreamID reports whether s is a Redis stream ID, "<ms>-<n>".
func validStreamID(s string) bool {
	ms, n, ok := strings.Cut(s, "-")
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(n, 10, 64)
	return ok && err1 == nil && err2 == nil
}

// auditTime is the time of a stream entry ID ("1700000000000-0").
func auditTime(id string) time.Time {
	return audit.Entry{ID: id}.Time()
}

// auditLine shows a record on one line: its time, then its fields. The
// chain's fields are left out (bot audit export has them); a record
// from before the chain shows its "hash", the arguments' hash.
func auditLine(rec map[string]string) string {
	parts := []string{rec["time"]}
	seen := map[string]bool{"time": true, "at": true}
	if _, chained := rec[audit.FieldSeq]; chained {
		for _, k := range []string{audit.FieldSeq, audit.FieldPrev, audit.FieldHash} {
			seen[k] = true
		}
	}
	for _, k := range auditFields {
		if v := rec[k]; v != "" && !seen[k] {
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
