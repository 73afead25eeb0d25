package main

import (
	"strings"
	"testing"
	"time"
)

// A run as go test -json reports it: one package passes with a slow test
// and a skipped one, another fails with a subtest, a third does not
// build, and go test prints a line of its own.
const run = `{"Action":"start","Package":"github.com/countersign/countersign/runner"}
{"Action":"run","Package":"github.com/countersign/countersign/runner","Test":"TestQuick"}
{"Action":"output","Package":"github.com/countersign/countersign/runner","Test":"TestQuick","Output":"=== RUN   TestQuick\n"}
{"Action":"pass","Package":"github.com/countersign/countersign/runner","Test":"TestQuick","Elapsed":0.01}
{"Action":"run","Package":"github.com/countersign/countersign/runner","Test":"TestSlow"}
{"Action":"pass","Package":"github.com/countersign/countersign/runner","Test":"TestSlow","Elapsed":7.5}
{"Action":"run","Package":"github.com/countersign/countersign/runner","Test":"TestCluster"}
{"Action":"output","Package":"github.com/countersign/countersign/runner","Test":"TestCluster","Output":"    x_test.go:9: needs a real redis-server\n"}
{"Action":"skip","Package":"github.com/countersign/countersign/runner","Test":"TestCluster","Elapsed":0}
{"Action":"pass","Package":"github.com/countersign/countersign/runner","Elapsed":8.1}
{"Action":"run","Package":"github.com/countersign/countersign/audit","Test":"TestVerify"}
{"Action":"run","Package":"github.com/countersign/countersign/audit","Test":"TestVerify/edited"}
{"Action":"output","Package":"github.com/countersign/countersign/audit","Test":"TestVerify","Output":"=== RUN   TestVerify\n"}
{"Action":"output","Package":"github.com/countersign/countersign/audit","Test":"TestVerify/edited","Output":"    audit_test.go:40: Verify() = nil, want a broken chain\n"}
{"Action":"fail","Package":"github.com/countersign/countersign/audit","Test":"TestVerify/edited","Elapsed":0.2}
{"Action":"fail","Package":"github.com/countersign/countersign/audit","Test":"TestVerify","Elapsed":0.2}
{"Action":"output","Package":"github.com/countersign/countersign/audit","Output":"FAIL\n"}
{"Action":"fail","Package":"github.com/countersign/countersign/audit","Elapsed":0.3}
{"ImportPath":"github.com/countersign/countersign/tools","Action":"build-output","Output":"tools/x.go:3:1: syntax error\n"}
{"ImportPath":"github.com/countersign/countersign/tools","Action":"build-fail"}
go: some line of go test's own
`

func TestProgressLines(t *testing.T) {
	var out strings.Builder
	clock := time.Unix(0, 0)
	p := newProgress(&out, func() time.Time { return clock })
	failed, err := p.read(strings.NewReader(run))
	if err != nil || !failed {
		t.Fatalf("read() = %v, %v; want true, nil", failed, err)
	}
	p.summary()
	got := out.String()
	for _, want := range []string{
		"  ok   runner TestSlow (7.5s)\n",
		"ok   github.com/countersign/countersign/runner 8.1s (2 passed, 1 skipped)\n",
		"--- FAIL audit TestVerify (200ms)\n    === RUN   TestVerify\n        audit_test.go:40: Verify() = nil, want a broken chain\n",
		"FAIL github.com/countersign/countersign/audit 300ms (0 passed, 1 failed)\n",
		"FAIL github.com/countersign/countersign/tools: build failed\ntools/x.go:3:1: syntax error\n",
		"go: some line of go test's own\n",
		"=== what failed (2), in brief; the whole output of each is above:\n" +
			"--- FAIL audit TestVerify (200ms)\n    audit_test.go:40: Verify() = nil, want a broken chain\n" +
			"FAIL github.com/countersign/countersign/tools: build failed\n" +
			"FAIL: 2 packages (1 failed), 2 tests passed, 1 skipped",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q; got:\n%s", want, got)
		}
	}
	for _, notWant := range []string{"TestQuick", "needs a real redis-server"} {
		if strings.Contains(got, notWant) {
			t.Errorf("output has %q (a quick pass, a skip's output); got:\n%s", notWant, got)
		}
	}
}

// A test running past the heartbeat is named, a parallel one from when
// its turn came; a package cut off (go test killed) fails.
func TestProgressHeartbeatAndCutOff(t *testing.T) {
	var out strings.Builder
	clock := time.Unix(0, 0)
	p := newProgress(&out, func() time.Time { return clock })
	p.handle(event{Action: "run", Package: "github.com/countersign/countersign/cmd/bot", Test: "TestLong"})
	clock = clock.Add(heartbeat + time.Second)
	p.tick()
	if want := "still running: cmd/bot TestLong (31s)"; !strings.Contains(out.String(), want) {
		t.Errorf("tick() printed %q, want %q", out.String(), want)
	}
	// Parallel tests waiting for their turn are not running: named from
	// the moment they continue.
	p.handle(event{Action: "run", Package: "github.com/countersign/countersign/cmd/bot", Test: "TestWaiting"})
	p.handle(event{Action: "pause", Package: "github.com/countersign/countersign/cmd/bot", Test: "TestWaiting"})
	clock = clock.Add(heartbeat + time.Second)
	out.Reset()
	p.tick()
	if got := out.String(); strings.Contains(got, "TestWaiting") {
		t.Errorf("tick() named a paused test: %q", got)
	}
	p.handle(event{Action: "cont", Package: "github.com/countersign/countersign/cmd/bot", Test: "TestWaiting"})
	clock = clock.Add(heartbeat)
	p.tick()
	if want := "still running: cmd/bot TestLong (1m32s), cmd/bot TestWaiting (30s)"; !strings.Contains(out.String(), want) {
		t.Errorf("tick() printed %q, want %q", out.String(), want)
	}
	failed, _ := p.read(strings.NewReader(""))
	if !failed || !strings.Contains(out.String(), "FAIL github.com/countersign/countersign/cmd/bot: no result") {
		t.Errorf("a package with no result: failed = %v, output:\n%s", failed, out.String())
	}
}

// A package that panics (go test's -timeout among others) cuts its
// running tests off: the panic and the tests cut off are in the recap
// above the summary, and a long log around a failure is not.
func TestProgressRecapOfATimeout(t *testing.T) {
	const bot = `"Package":"github.com/countersign/countersign/cmd/bot"`
	var run strings.Builder
	run.WriteString(`{"Action":"run",` + bot + `,"Test":"TestStuck"}` + "\n")
	for i := range 40 {
		run.WriteString(`{"Action":"output",` + bot + `,"Test":"TestStuck","Output":"time=\"...\" level=info msg=\"step ` + strings.Repeat("x", i%3) + `\"\n"}` + "\n")
	}
	run.WriteString(`{"Action":"output",` + bot + `,"Test":"TestStuck","Output":"    stuck_test.go:12: waiting for the card\n"}` + "\n")
	run.WriteString(`{"Action":"output",` + bot + `,"Output":"panic: test timed out after 30m0s\n"}` + "\n")
	run.WriteString(`{"Action":"output",` + bot + `,"Output":"FAIL\tgithub.com/countersign/countersign/cmd/bot\t1800.1s\n"}` + "\n")
	run.WriteString(`{"Action":"fail",` + bot + `,"Elapsed":1800.1}` + "\n")

	var out strings.Builder
	p := newProgress(&out, func() time.Time { return time.Unix(0, 0) })
	if failed, _ := p.read(strings.NewReader(run.String())); !failed {
		t.Fatal("read() = false, want a failure")
	}
	p.summary()
	_, recap, ok := strings.Cut(out.String(), "=== what failed (2)")
	if !ok {
		t.Fatalf("no recap of two failures; got:\n%s", out.String())
	}
	want := "FAIL cmd/bot, outside any test:\n    panic: test timed out after 30m0s\n" +
		"    FAIL\tgithub.com/countersign/countersign/cmd/bot\t1800.1s\n" +
		"--- cmd/bot TestStuck did not finish:\n    stuck_test.go:12: waiting for the card\n"
	if !strings.Contains(recap, want) || strings.Contains(recap, "level=info") {
		t.Errorf("recap:\n%s\nwant it to hold:\n%s\nand no log lines", recap, want)
	}
}

// A test whose subtests are parallel passes with the time of its own
// function (0s): it still gets its line, with the time since its turn.
func TestProgressParallelSubtestsTime(t *testing.T) {
	var out strings.Builder
	clock := time.Unix(0, 0)
	p := newProgress(&out, func() time.Time { return clock })
	p.handle(event{Action: "run", Package: "github.com/countersign/countersign/cmd/bot", Test: "TestTwoCrashes"})
	p.handle(event{Action: "run", Package: "github.com/countersign/countersign/cmd/bot", Test: "TestTwoCrashes/a"})
	clock = clock.Add(70 * time.Second)
	p.handle(event{Action: "pass", Package: "github.com/countersign/countersign/cmd/bot", Test: "TestTwoCrashes/a", Elapsed: 70})
	p.handle(event{Action: "pass", Package: "github.com/countersign/countersign/cmd/bot", Test: "TestTwoCrashes", Elapsed: 0})
	if want := "  ok   cmd/bot TestTwoCrashes (1m10s)\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}
