package runner_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
)

// An operator reads a conversation's runs in the log: each run's lines
// say which thread and run they are of and how the run began (the
// request's are the requester's too), its start and where it stopped
// each have a line, the pause says its checkpoint and how many calls
// wait, and the click in between says who decided what. The fields of
// the logger the service was given stay on every line. A run's start is
// at debug level: at info, each run is the line of where it stopped.
func TestRunLinesSayWhichRun(t *testing.T) {
	ctx := context.Background()
	w, tg := newWorld(t)
	log := logrus.New()
	log.Out = io.Discard
	log.SetLevel(logrus.DebugLevel)
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
		wantLevel := logrus.InfoLevel
		if e.Message == "run started" {
			wantLevel = logrus.DebugLevel
		}
		if e.Level != wantLevel {
			t.Errorf("%q logged at %s, want %s", e.Message, e.Level, wantLevel)
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
		if got := lines[run]; len(got) != 2 || got[0] != "run started" || got[1] != stop {
			t.Errorf("run %d logged %q, want [\"run started\" %q]", i+1, got, stop)
		}
	}
}
