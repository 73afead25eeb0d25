package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

const (
	// heartbeat is how often the tests still running are named.
	heartbeat = 30 * time.Second
	// slow is how long a passing top-level test runs before it gets a
	// line of its own.
	slow = 5 * time.Second
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output and build-fail
}

// pkgState is what is known of one package so far.
type pkgState struct {
	started time.Time
	// output of each test (subtests under their own name) and of the
	// package itself (""), kept until it passes.
	output  map[string]*strings.Builder
	running map[string]time.Time // top-level tests running (not paused), since when
	passed  int
	skipped int
	failed  []string
}

// progress turns test events into lines. It is safe for concurrent use:
// read runs on one goroutine, tick on another.
type progress struct {
	mu     sync.Mutex
	out    io.Writer
	now    func() time.Time
	pkgs   map[string]*pkgState
	build  map[string]*strings.Builder // build output by import path
	failed bool
	// counts over all packages, for the summary
	pkgsDone, pkgsFailed, tests, skips int
	start                              time.Time
	// recap repeats each failure, briefly, just above the summary: a
	// log that is read from its end (a CI page showing the last lines)
	// still names what failed and why.
	recap []string
}

func newProgress(out io.Writer, now func() time.Time) *progress {
	return &progress{out: out, now: now, pkgs: map[string]*pkgState{}, build: map[string]*strings.Builder{}, start: now()}
}

// read consumes the events on r; it reports whether anything failed.
func (p *progress) read(r io.Reader) (bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			p.mu.Lock()
			fmt.Fprintf(p.out, "%s\n", line)
			p.mu.Unlock()
			continue
		}
		p.handle(ev)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A package that never said pass or fail (go test killed) failed.
	for name := range p.pkgs {
		fmt.Fprintf(p.out, "FAIL %s: no result (go test stopped)\n", name)
		p.recap = append(p.recap, fmt.Sprintf("FAIL %s: no result (go test stopped)", name))
		p.failed = true
	}
	return p.failed, sc.Err()
}

func (p *progress) pkg(name string) *pkgState {
	s, ok := p.pkgs[name]
	if !ok {
		s = &pkgState{started: p.now(), output: map[string]*strings.Builder{}, running: map[string]time.Time{}}
		p.pkgs[name] = s
	}
	return s
}

// topLevel is the top-level test a test or subtest belongs to.
func topLevel(test string) string {
	top, _, _ := strings.Cut(test, "/")
	return top
}

func (p *progress) handle(ev event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev.Action {
	case "build-output":
		b, ok := p.build[ev.ImportPath]
		if !ok {
			b = &strings.Builder{}
			p.build[ev.ImportPath] = b
		}
		b.WriteString(ev.Output)
		return
	case "build-fail":
		p.failed = true
		fmt.Fprintf(p.out, "FAIL %s: build failed\n%s", ev.ImportPath, p.build[ev.ImportPath])
		p.recap = append(p.recap, fmt.Sprintf("FAIL %s: build failed", ev.ImportPath))
		delete(p.build, ev.ImportPath)
		return
	}
	if ev.Package == "" {
		return
	}
	s := p.pkg(ev.Package)
	switch ev.Action {
	case "start":
	case "run", "cont":
		// A parallel test pauses at t.Parallel until its turn, and
		// continues then: it counts as running from that moment.
		if ev.Test != "" && !strings.Contains(ev.Test, "/") {
			s.running[ev.Test] = p.now()
		}
	case "pause":
		delete(s.running, ev.Test)
	case "output":
		b, ok := s.output[ev.Test]
		if !ok {
			b = &strings.Builder{}
			s.output[ev.Test] = b
		}
		b.WriteString(ev.Output)
	case "pass", "fail", "skip":
		if ev.Test == "" {
			p.finishPackage(ev, s)
			return
		}
		if strings.Contains(ev.Test, "/") {
			return // a subtest: reported with its top-level test
		}
		p.finishTest(ev, s)
	}
}

func (p *progress) finishTest(ev event, s *pkgState) {
	elapsed := time.Duration(ev.Elapsed * float64(time.Second))
	// A test whose subtests are parallel reports the time of its own
	// function alone (0s): its time is counted from when its turn came.
	if since, ok := s.running[ev.Test]; ok && p.now().Sub(since) > elapsed {
		elapsed = p.now().Sub(since)
	}
	delete(s.running, ev.Test)
	switch ev.Action {
	case "pass":
		s.passed++
		if elapsed >= slow {
			fmt.Fprintf(p.out, "  ok   %s %s (%s)\n", short(ev.Package), ev.Test, elapsed.Round(10*time.Millisecond))
		}
	case "skip":
		s.skipped++
	case "fail":
		s.failed = append(s.failed, ev.Test)
		head := fmt.Sprintf("--- FAIL %s %s (%s)", short(ev.Package), ev.Test, elapsed.Round(10*time.Millisecond))
		fmt.Fprintln(p.out, head)
		p.addRecap(head, p.printOutput(s, ev.Test))
	}
	if ev.Action != "fail" {
		// The output of a test that passed or skipped is not needed.
		for name := range s.output {
			if topLevel(name) == ev.Test {
				delete(s.output, name)
			}
		}
	}
}

// printOutput prints everything a failed top-level test and its subtests
// wrote, in the order go test gave it for each, and returns it.
func (p *progress) printOutput(s *pkgState, test string) string {
	var names []string
	for name := range s.output {
		if topLevel(name) == test {
			names = append(names, name)
		}
	}
	sort.Strings(names) // the test before its subtests
	var all strings.Builder
	for _, name := range names {
		out := s.output[name].String()
		io.WriteString(p.out, indent(out))
		all.WriteString(out)
		delete(s.output, name)
	}
	return all.String()
}

// recapLines is how many lines of a failure's own messages the recap
// keeps, the last ones.
const recapLines = 12

// addRecap keeps head and the lines of output that say why it failed: a
// test's t.Error/t.Fatal lines (file_test.go:N:), subtests' --- FAIL
// lines, panics and timeouts, not the logs around them.
func (p *progress) addRecap(head, output string) {
	var why []string
	for _, line := range strings.Split(output, "\n") {
		if failureLine.MatchString(line) {
			why = append(why, "    "+strings.TrimSpace(line))
		}
	}
	if len(why) > recapLines {
		why = append([]string{fmt.Sprintf("    (%d lines before these)", len(why)-recapLines)}, why[len(why)-recapLines:]...)
	}
	p.recap = append(p.recap, strings.Join(append([]string{head}, why...), "\n"))
}

// saysMore reports whether a package's own output says more than that
// it failed (go test's closing "FAIL" lines and exit status).
func saysMore(output string) bool {
	for _, line := range strings.Split(output, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && line != "FAIL" && !strings.HasPrefix(line, "FAIL\t") && !strings.HasPrefix(line, "exit status ") {
			return true
		}
	}
	return false
}

// failureLine matches the lines of a test's output that say why it
// failed.
var failureLine = regexp.MustCompile(`^\s*(\S+_test\.go:\d+: |--- FAIL|panic: |fatal error: |FAIL\b|\*\*\* Test killed|WARNING: DATA RACE)`)

func (p *progress) finishPackage(ev event, s *pkgState) {
	delete(p.pkgs, ev.Package)
	p.pkgsDone++
	p.tests += s.passed
	p.skips += s.skipped
	elapsed := time.Duration(ev.Elapsed * float64(time.Second)).Round(10 * time.Millisecond)
	counts := fmt.Sprintf("%d passed", s.passed)
	if s.skipped > 0 {
		counts += fmt.Sprintf(", %d skipped", s.skipped)
	}
	switch ev.Action {
	case "pass":
		fmt.Fprintf(p.out, "ok   %s %s (%s)\n", ev.Package, elapsed, counts)
	case "skip":
		// no test files
	case "fail":
		p.failed = true
		p.pkgsFailed++
		fmt.Fprintf(p.out, "FAIL %s %s (%s, %d failed)\n", ev.Package, elapsed, counts, len(s.failed))
		// What the package printed outside any test (a panic, a
		// TestMain that gave up, a timeout) and tests cut off by it.
		if b, ok := s.output[""]; ok {
			io.WriteString(p.out, indent(b.String()))
			if saysMore(b.String()) {
				p.addRecap(fmt.Sprintf("FAIL %s, outside any test:", short(ev.Package)), b.String())
			}
			delete(s.output, "")
		}
		var left []string
		for name := range s.output {
			left = append(left, topLevel(name))
		}
		slices.Sort(left)
		for _, name := range slices.Compact(left) {
			head := fmt.Sprintf("--- %s %s did not finish:", short(ev.Package), name)
			fmt.Fprintln(p.out, head)
			p.addRecap(head, p.printOutput(s, name))
		}
	}
}

// tick names the tests running for longer than a heartbeat.
func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	var names []string
	for pkg, s := range p.pkgs {
		for test, since := range s.running {
			if now.Sub(since) >= heartbeat {
				names = append(names, fmt.Sprintf("%s %s (%s)", short(pkg), test, now.Sub(since).Round(time.Second)))
			}
		}
	}
	if len(names) == 0 {
		return
	}
	slices.Sort(names)
	const most = 6
	more := ""
	if len(names) > most {
		more = fmt.Sprintf(" and %d more", len(names)-most)
		names = names[:most]
	}
	fmt.Fprintf(p.out, "     still running: %s%s\n", strings.Join(names, ", "), more)
}

// summary is the last line.
func (p *progress) summary() {
	p.mu.Lock()
	defer p.mu.Unlock()
	verdict := "ok"
	if p.failed {
		verdict = "FAIL"
	}
	if len(p.recap) > 0 {
		fmt.Fprintf(p.out, "=== what failed (%d), in brief; the whole output of each is above:\n", len(p.recap))
		for _, r := range p.recap {
			fmt.Fprintln(p.out, r)
		}
	}
	fmt.Fprintf(p.out, "%s: %d packages (%d failed), %d tests passed, %d skipped, in %s\n",
		verdict, p.pkgsDone, p.pkgsFailed, p.tests, p.skips, p.now().Sub(p.start).Round(time.Second))
}

// short drops the module path from a package's import path.
func short(pkg string) string {
	const module = "github.com/countersign/countersign/"
	if rest, ok := strings.CutPrefix(pkg, module); ok {
		return rest
	}
	return pkg
}

// indent sets output off from the progress lines.
func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	if !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
	return b.String()
}
