package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/bot"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/internal/termtext"
	"github.com/countersign/countersign/redisstore"
)

// operatorStore opens the Redis of REDIS_URL for an operator command.
func operatorStore(ctx context.Context, e env, name string) (*redisstore.Store, func(), error) {
	return openStore(ctx, e, name, redisstore.Options{})
}

// confirmingStore is operatorStore for a command that prints what an
// operator may note elsewhere (the audit chain's head): with
// REDIS_WAIT_REPLICAS set, what it reads is confirmed on that many
// replicas (redisstore.Options.Replicas), so that a failover cannot take
// it back. Unset, it is operatorStore, with no round trip more.
func confirmingStore(ctx context.Context, e env, name string) (*redisstore.Store, func(), error) {
	n, set, err := bot.ReplicasSetting(e.getenv)
	if err != nil {
		return nil, nil, err
	}
	if !set {
		n = 0
	}
	return openStore(ctx, e, name, redisstore.Options{Replicas: n})
}

// openStore opens the Redis of REDIS_URL for the operator command name,
// with opts.
func openStore(ctx context.Context, e env, name string, opts redisstore.Options) (*redisstore.Store, func(), error) {
	if err := needRedis(e, name); err != nil {
		return nil, nil, err
	}
	log, err := newLogger(e.getenv, e.stderr, logrus.WarnLevel)
	if err != nil {
		return nil, nil, err
	}
	rdb, _, closeRedis, err := bot.ConnectRedis(ctx, e.getenv, log)
	if err != nil {
		return nil, nil, err
	}
	return redisstore.New(rdb, opts), closeRedis, nil
}

// escapedTerminal returns e with its standard output and error escaped for a
// terminal (termtext), and a function that flushes them: for what an
// operator command prints, which holds text stored from elsewhere —
// pages, tool and server results, the model's text, names. Exports,
// which are file formats of their own, are not written through it.
func escapedTerminal(e env) (env, func()) {
	out, errOut := termtext.NewWriter(e.stdout), termtext.NewWriter(e.stderr)
	e.stdout, e.stderr = out, errOut
	return e, func() {
		_ = out.Flush() // a failed write was the command's to report
		_ = errOut.Flush()
	}
}

// threadRow is one line of "bot threads list".
type threadRow struct {
	Thread   string       `json:"thread"`
	Status   graph.Status `json:"status"`
	Updated  time.Time    `json:"updated"`
	Messages int          `json:"messages"`
	Waiting  []string     `json:"waiting,omitempty"`
	Error    string       `json:"error,omitempty"`
}

func runThreads(ctx context.Context, args []string, e env) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		args = []string{"list", "--help"} // the one subcommand's help
	}
	if len(args) == 0 || args[0] != "list" {
		return fmt.Errorf("threads: the subcommand is list (usage: bot threads list [--limit N] [--wide|--json])")
	}
	fs := flags("threads list", "threads list [--limit N] [--wide|--json]", e)
	limit := fs.Int("limit", 20, "how many threads, most recently updated first (0: all)")
	asJSON := fs.Bool("json", false, "print JSON")
	wide := fs.Bool("wide", false, "print every column whole instead of fitting the terminal")
	if err := parse(fs, args[1:], e); err != nil {
		return err
	}
	width := termWidth(e.getenv)
	if *wide {
		width = 0
	}
	store, closeStore, err := operatorStore(ctx, e, "threads list")
	if err != nil {
		return err
	}
	defer closeStore()
	e, flush := escapedTerminal(e)
	defer flush()
	names, err := store.Threads(ctx)
	if err != nil {
		return err
	}
	rows := make([]threadRow, 0, len(names))
	for _, name := range names {
		cp, err := store.Head(ctx, name)
		if err != nil {
			continue // deleted meanwhile
		}
		row := threadRow{Thread: name, Status: cp.Status, Updated: cp.Created, Messages: cp.JournalLen, Error: cp.Error}
		var st agent.State
		if json.Unmarshal(cp.State, &st) == nil {
			for _, c := range st.Waiting() {
				row.Waiting = append(row.Waiting, c.Key+":"+c.Tool)
			}
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b threadRow) int {
		return cmp.Or(b.Updated.Compare(a.Updated), strings.Compare(a.Thread, b.Thread))
	})
	if *limit > 0 && len(rows) > *limit {
		rows = rows[:*limit]
	}
	if *asJSON {
		return writeJSONTo(e.stdout, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(e.stdout, "No threads in this Redis.")
		return nil
	}
	tab := newTable("THREAD", "STATUS", "UPDATED", "MSGS", "WAITING").shrinks(4) // thread IDs whole: --thread takes them
	for _, r := range rows {
		waiting := strings.Join(r.Waiting, ",")
		tab.add(termtext.Line(r.Thread), r.Status.String(), r.Updated.UTC().Format(time.RFC3339), strconv.Itoa(r.Messages), termtext.Line(orNone(waiting)))
	}
	return tab.write(e.stdout, width)
}
