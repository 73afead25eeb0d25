package runner_test

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
)

// An operator reads a conversation's runs in the log: each run's lines
// say which thread and run they are of and how the run began (the
// request's are the requester's too), where it stopped has a line at the
// info level (and its start one at the debug level), the pause says its
// checkpoint and how many calls wait, and the click in between says who
// decided what. The fields of the logger the service was given stay on
// every line.
func TestRunLinesSayWhichRun(t *testing.T) {
	t.Parallel()
	for _, debug := range []bool{false, true} {
		t.Run(map[bool]string{false: "info", true: "debug"}[debug], func(t *testing.T) { runLinesSayWhichRun(t, debug) })
	}
}

func runLinesSayWhichRun(t *testing.T, debug bool) {
	ctx := context.Background()
	w, tg := newWorld(t)
	log := logrus.New()
	log.Out = io.Discard
	if debug {
		log.Level = logrus.DebugLevel
	}
	hook := logtest.NewLocal(log)
	w.log = log.WithField("replica", "r1")
	svc, _ := w.service(t, nil, time.Second)

	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if _, err := finish(ctx, svc, "th", "U_BOB", agent.Approve, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if tg.Count("POST /deploy") != 1 {
		t.Fatalf("deploy ran %d times, want 1", tg.Count("POST /deploy"))
	}

	// Each run: its start, then where it stopped, under one ID.
	var runs []string
	lines := map[string][]string{} // run → its lines' messages
	for _, e := range hook.AllEntries() {
		switch e.Message {
		case "run started", "run paused for approval", "run finished":
		case "decision claimed":
			if e.Data["thread"] != "th" || e.Data["by"] != "U_BOB" || e.Data["call"] == nil || e.Data["decision"] == nil {
				t.Errorf("%q logged with %v, want the thread, call, decision and who", e.Message, e.Data)
			}
			continue
		default:
			continue
		}
		how, _ := e.Data["how"].(string)
		run, _ := e.Data["run"].(string)
		if e.Data["thread"] != "th" || run == "" || how == "" || e.Data["replica"] != "r1" {
			t.Errorf("%q logged with %v, want the thread, the run, how it began and the logger's replica", e.Message, e.Data)
		}
		if _, seen := lines[run]; !seen {
			runs = append(runs, run)
		}
		lines[run] = append(lines[run], e.Message)
		wantHow := "resume"
		if len(runs) == 1 {
			wantHow = "start"
			if e.Data["requester"] != "U_ALICE" {
				t.Errorf("%q of the request logged with %v, want requester U_ALICE", e.Message, e.Data)
			}
		}
		if how != wantHow {
			t.Errorf("%q of run %d logged with how=%q, want %q", e.Message, len(runs), how, wantHow)
		}
		if e.Message == "run paused for approval" {
			if n, _ := e.Data["waiting"].(int); e.Data["checkpoint"] == nil || n < 1 {
				t.Errorf("%q logged with %v, want the checkpoint and how many calls wait", e.Message, e.Data)
			}
		}
		if e.Message == "run finished" && e.Data["checkpoint"] == nil {
			t.Errorf("%q logged with %v, want the checkpoint", e.Message, e.Data)
		}
	}
	if len(runs) < 2 {
		t.Fatalf("%d runs logged, want the request's and at least one resumed", len(runs))
	}
	for i, run := range runs {
		stop := "run paused for approval"
		if i == len(runs)-1 {
			stop = "run finished"
		}
		// At the info level a run logs where it stopped; that it
		// started is a debug line, with the same fields.
		want := []string{stop}
		if debug {
			want = []string{"run started", stop}
		}
		if got := lines[run]; !slices.Equal(got, want) {
			t.Errorf("run %d logged %q at level %s, want %q", i+1, got, log.Level, want)
		}
	}
}
