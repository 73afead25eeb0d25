package runner_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// The tests below run real processes: this test binary, started again
// with CHILD_MODE set, plays one replica of the bot against the same
// Redis and the same target server as the parent.
func TestMain(m *testing.M) {
	if mode := os.Getenv("CHILD_MODE"); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child is the replica's main. It prints one line of outcome to stdout.
func child(mode string) int {
	ctx := context.Background()
	w := world{
		rdb:    redis.NewClient(&redis.Options{Addr: os.Getenv("CHILD_REDIS")}),
		prefix: os.Getenv("CHILD_PREFIX"),
		base:   os.Getenv("CHILD_TARGET"),
		// CHILD_SCHEDULE: the replica keeps the wake-up schedule.
		schedule: os.Getenv("CHILD_SCHEDULE") != "",
	}
	if tool := os.Getenv("CHILD_ONE_CALL"); tool != "" {
		w.oneCall(tool)
	}
	thread, user := os.Getenv("CHILD_THREAD"), os.Getenv("CHILD_USER")
	t := &childTB{}
	switch mode {
	case "decide":
		svc, _ := w.service(t, nil, time.Second)
		at, _ := strconv.ParseInt(os.Getenv("CHILD_START_AT"), 10, 64)
		time.Sleep(time.Until(time.Unix(0, at))) // start together with the other replica
		err := svc.Decide(ctx, runner.Decision{Thread: thread, Call: os.Getenv("CHILD_CALL"), Kind: agent.Approve, By: user})
		var lost *runner.AlreadyDecidedError
		switch {
		case err == nil:
			if err := svc.Drive(ctx, thread); err != nil {
				fmt.Println("ERROR", err)
				return 1
			}
			fmt.Println("WON")
		case errors.As(err, &lost):
			fmt.Println("LOST", lost.Decision.By)
		default:
			fmt.Println("ERROR", err)
			return 1
		}
	case "ask-then-die":
		// Start the thread and die while the model is asked, before
		// anything of the conversation is saved.
		w.model = modelFunc(func() {
			fmt.Println("ASKED")
			select {} // the parent kills us here
		})
		svc, _ := w.service(t, nil, processLease)
		if err := svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: "U_ALICE", Text: "ship"}); err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
	case "decide-drive", "decide-drive-die", "decide-drive-stall":
		// A click as the Slack handler takes it, on a thread this
		// replica has cached: CHILD_ONE_CALL names the only call
		// waiting. decide-drive-die stops (and waits for SIGKILL)
		// right after the save that claimed the decision, before the
		// call is sent.
		w.oneCall(os.Getenv("CHILD_ONE_CALL"))
		seen := &claimSaves{}
		w.checkpoints = seen.wrap
		switch mode {
		case "decide-drive-die":
			seen.onSaved = func() {
				fmt.Println("SAVED")
				select {} // the parent kills us here
			}
		case "decide-drive-stall":
			seen.onSaved = func() {
				// The parent stops us here until our lease is over and
				// another replica has finished the run.
				fmt.Println("STALLED")
				_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
			}
		}
		svc, _ := w.service(t, nil, processLease)
		if _, err := svc.State(ctx, thread); err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		at, _ := strconv.ParseInt(os.Getenv("CHILD_START_AT"), 10, 64)
		time.Sleep(time.Until(time.Unix(0, at))) // start together with the other replica
		err := svc.DecideAndDrive(ctx, runner.Decision{Thread: thread, Call: os.Getenv("CHILD_CALL"), Kind: agent.Approve, By: user},
			func(err error) {
				var lost *runner.AlreadyDecidedError
				switch {
				case err == nil:
					fmt.Println("WON")
				case errors.As(err, &lost):
					fmt.Println("LOST", lost.Decision.By)
				default:
					fmt.Println("ERROR", err)
				}
			})
		var lost *runner.AlreadyDecidedError
		if err != nil && !errors.As(err, &lost) {
			fmt.Println("ERROR", err)
			return 1
		}
		fmt.Println("END", seen.list())
	case "card-then-die":
		// Start the thread and die as the first card is about to be shown:
		// the pause is saved, no card has been seen.
		rep := runner.ReporterFunc(func(_ context.Context, e runner.Event) error {
			if e.Kind == runner.ApprovalNeeded {
				fmt.Println("CARD")
				select {} // the parent kills us here
			}
			return nil
		})
		svc, _ := w.service(t, rep, processLease)
		if err := svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: "U_ALICE", Text: "ship"}); err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
	case "show-cards":
		// Drive the thread until the cards it owes have been shown.
		var mu sync.Mutex
		var cards []string
		rep := runner.ReporterFunc(func(_ context.Context, e runner.Event) error {
			if e.Kind == runner.ApprovalNeeded {
				mu.Lock()
				cards = append(cards, e.Call.Tool)
				mu.Unlock()
			}
			return nil
		})
		svc, _ := w.service(t, rep, processLease)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if err := svc.Drive(ctx, thread); err != nil {
				fmt.Println("ERROR", err)
				return 1
			}
			mu.Lock()
			n := len(cards)
			mu.Unlock()
			if n >= 2 {
				break
			}
		}
		_ = svc.Drive(ctx, thread) // once more: nothing is shown twice
		mu.Lock()
		fmt.Println("CARDS", strings.Join(cards, ","))
		mu.Unlock()
	case "drive":
		// Die (stop, and wait for SIGKILL) right after save number
		// CHILD_KILL_AFTER, or finish the run and say how many saves
		// it took.
		killAfter, _ := strconv.Atoi(os.Getenv("CHILD_KILL_AFTER"))
		stallAfter, _ := strconv.Atoi(os.Getenv("CHILD_STALL_AFTER"))
		saves := 0
		w.afterSave = func(cp *graph.Checkpoint) {
			saves++
			// A run's last save (it paused, finished or failed) ends
			// its session: the lease is let go with it.
			ended := ""
			if cp.Status != graph.Running {
				ended = " ended"
			}
			switch saves {
			case killAfter:
				fmt.Println("SAVED"+ended, saves)
				select {} // the parent kills us here
			case stallAfter:
				// The parent stops us (SIGSTOP) here, ends our lease
				// and lets another replica take the thread, then lets
				// us go on with a line on stdin.
				fmt.Println("STALLED"+ended, saves)
				_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
			}
		}
		svc, _ := w.service(t, nil, processLease)
		if _, err := svc.State(ctx, thread); errors.Is(err, runner.ErrNoThread) {
			if err := svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: "U_ALICE", Text: "ship"}); err != nil {
				fmt.Println("ERROR", err)
				return 1
			}
		}
		onUnknown := agent.Approve // retry
		if os.Getenv("CHILD_ON_UNKNOWN") == "mark_done" {
			onUnknown = agent.MarkDone
		}
		res, err := finish(ctx, svc, thread, user, onUnknown, 30*time.Second)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		fmt.Println("DONE", saves, strconv.Quote(res.State.Answer()))
	}
	return 0
}

// processLease is the lease of the replicas the tests below run: long
// enough that no live replica loses it on a busy machine, whose renewals
// (every third of it) may come late. A test that kills or stops a
// replica ends its lease itself (endLease, endStalledLease) rather than
// waiting for it to lapse, so the next replica takes the thread at once.
const processLease = 5 * time.Second

// leaseKey is the Redis key of the thread's lease (redisstore).
func leaseKey(w world, thread string) string { return w.prefix + ":{" + thread + "}:lease" }

// endLease ends the lease on the thread that a killed replica held, as
// its lapse would.
func endLease(t *testing.T, w world, thread string) {
	t.Helper()
	n, err := w.rdb.Del(context.Background(), leaseKey(w, thread)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("the lease on %s was not held when its holder died", thread)
	}
}

// endStalledLease ends the lease on the thread that a stalled run holds,
// as its lapse would — but not before the run's last renewal is a third
// of the lease old: a run trusts a renewal that recent without asking
// Redis again (runner.Service.BeforeCall), which it may, since a lease
// lapses a whole lease after it is renewed. It waits for Redis to say
// so: the lease's time to live is down to two thirds.
func endStalledLease(t *testing.T, w world, thread string, lease time.Duration) {
	t.Helper()
	ctx := context.Background()
	// A margin for the renewal being sent before Redis received it.
	trusted := lease*2/3 - 50*time.Millisecond
	for {
		left, err := w.rdb.PTTL(ctx, leaseKey(w, thread)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if left < 0 {
			t.Fatalf("the lease on %s is not held by the stalled run (time to live %v)", thread, left)
		}
		if left <= trusted {
			break
		}
		time.Sleep(left - trusted)
	}
	endLease(t, w, thread)
}

// leaseFree checks that nobody holds the thread's lease: the save a
// replica died after ended its session.
func leaseFree(t *testing.T, w world, thread string) {
	t.Helper()
	n, err := w.rdb.Exists(context.Background(), leaseKey(w, thread)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the lease on %s is held after a save that ended the session", thread)
	}
}

// heldOff checks that while a replica holds the thread's lease, nobody
// else runs the thread: driving it from another service does nothing.
func heldOff(t *testing.T, w world, thread string) {
	t.Helper()
	ctx := context.Background()
	svc, _ := w.service(t, nil, processLease)
	before, err := svc.State(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Drive(ctx, thread); err != nil {
		t.Fatalf("Drive() while another replica holds the lease = %v", err)
	}
	after, err := svc.State(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	if after.Checkpoint.ID != before.Checkpoint.ID {
		t.Fatalf("the thread went on from checkpoint %s to %s while another replica held its lease", before.Checkpoint.ID, after.Checkpoint.ID)
	}
}

// childTB lets the fixture's helpers run outside a test.
type childTB struct{ testing.TB }

func (childTB) Helper()                   {}
func (childTB) Fatal(args ...any)         { fmt.Println("ERROR", fmt.Sprint(args...)); os.Exit(1) }
func (childTB) Fatalf(f string, a ...any) { fmt.Println("ERROR", fmt.Sprintf(f, a...)); os.Exit(1) }

// replica is a running child process.
type replica struct {
	cmd   *exec.Cmd
	lines chan string
	stdin io.WriteCloser
}

func startReplica(t *testing.T, w world, mode string, env ...string) *replica {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"CHILD_MODE="+mode,
		"CHILD_REDIS="+w.rdb.(*redis.Client).Options().Addr,
		"CHILD_PREFIX="+w.prefix,
		"CHILD_TARGET="+w.base,
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{cmd: cmd, lines: make(chan string, 16), stdin: stdin}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return r
}

// line waits for the replica's next line of output.
func (r *replica) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-r.lines:
		if !ok {
			t.Fatal("replica exited without a word")
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatal("replica said nothing for a minute")
	}
	return ""
}

// TestTwoProcessesDecideOneCall: two replicas click Approve on the same
// call at the same moment. Exactly one wins; the other is told who.
func TestTwoProcessesDecideOneCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	svc, _ := w.service(t, nil, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatal(err)
	}
	key := waitingCall(t, svc, "th", "deploy").Key
	at := strconv.FormatInt(time.Now().Add(time.Second).UnixNano(), 10)
	a := startReplica(t, w, "decide", "CHILD_THREAD=th", "CHILD_CALL="+key, "CHILD_USER=U_A", "CHILD_START_AT="+at)
	b := startReplica(t, w, "decide", "CHILD_THREAD=th", "CHILD_CALL="+key, "CHILD_USER=U_B", "CHILD_START_AT="+at)
	got := map[string]string{"U_A": a.line(t), "U_B": b.line(t)}
	switch {
	case got["U_A"] == "WON" && got["U_B"] == "LOST U_A":
	case got["U_B"] == "WON" && got["U_A"] == "LOST U_B":
	default:
		t.Errorf("replicas said %v, want one WON and the other LOST naming the winner", got)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// countSaves runs the thread uninterrupted in a replica and returns how
// many checkpoint saves it takes.
func countSaves(t *testing.T, w world, thread string) int {
	t.Helper()
	probe := startReplica(t, w, "drive", "CHILD_THREAD="+thread, "CHILD_USER=U_BOB")
	var total int
	if _, err := fmt.Sscanf(probe.line(t), "DONE %d ", &total); err != nil || total < 6 {
		t.Fatalf("uninterrupted run: %d saves (%v); want at least 6", total, err)
	}
	return total
}

// TestKilledAtEverySave kills a replica with SIGKILL right after each
// checkpoint save in turn — every superstep boundary, and the saves
// around each tool call — then lets another replica finish the run from
// Redis. Every approved call must run exactly once, and the rejected one
// never.
func TestKilledAtEverySave(t *testing.T) {
	t.Parallel()
	w, _ := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))

	// An uninterrupted run says how many saves there are.
	total := countSaves(t, w, "probe")
	var mu sync.Mutex
	for k := 1; k <= total; k++ {
		t.Run(fmt.Sprintf("after save %d of %d", k, total), func(t *testing.T) {
			tg := newTarget(t)
			w := w
			w.base = tg.URL
			thread := fmt.Sprintf("kill-%d", k)
			victim := startReplica(t, w, "drive", "CHILD_THREAD="+thread, "CHILD_USER=U_BOB", fmt.Sprintf("CHILD_KILL_AFTER=%d", k))
			l := victim.line(t)
			if l != fmt.Sprintf("SAVED %d", k) && l != fmt.Sprintf("SAVED ended %d", k) {
				t.Fatalf("victim said %q, want SAVED %d", l, k)
			}
			if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = victim.cmd.Wait()
			// The heir takes the thread once the victim's lease is gone,
			// not before; a save that ended the session let it go.
			if strings.Contains(l, "ended") {
				leaseFree(t, w, thread)
			} else {
				heldOff(t, w, thread)
				endLease(t, w, thread)
			}

			heir := startReplica(t, w, "drive", "CHILD_THREAD="+thread, "CHILD_USER=U_BOB")
			if l := heir.line(t); !strings.HasPrefix(l, "DONE") {
				t.Fatalf("heir said %q, want DONE", l)
			}
			mu.Lock()
			defer mu.Unlock()
			got := []int{tg.Count("GET /lookup"), tg.Count("POST /deploy"), tg.Count("POST /delete")}
			if got[0] != 1 || got[1] != 1 || got[2] != 0 {
				t.Errorf("executions lookup/deploy/delete = %v, want [1 1 0]", got)
			}
		})
	}
}

// TestStalledPastItsLease stops a replica (SIGSTOP) right after each
// checkpoint save in turn — between a decision's claim and the call, and
// everywhere else — until its lease is over (the test ends it, as its
// lapse would), lets another replica take the thread over and finish the
// run, then lets the stalled one go on.
// It must notice it lost the thread and do nothing more: every approved
// call runs exactly once, the rejected one never.
func TestStalledPastItsLease(t *testing.T) {
	t.Parallel()
	w, _ := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	total := countSaves(t, w, "probe-stall")
	for k := 1; k <= total; k++ {
		t.Run(fmt.Sprintf("after save %d of %d", k, total), func(t *testing.T) {
			tg := newTarget(t)
			w := w
			w.base = tg.URL
			thread := fmt.Sprintf("stall-%d", k)
			victim := startReplica(t, w, "drive", "CHILD_THREAD="+thread, "CHILD_USER=U_BOB", fmt.Sprintf("CHILD_STALL_AFTER=%d", k))
			l := victim.line(t)
			if l != fmt.Sprintf("STALLED %d", k) && l != fmt.Sprintf("STALLED ended %d", k) {
				t.Fatalf("victim said %q, want STALLED %d", l, k)
			}
			if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// The heir takes the thread over once the victim's lease is
			// gone, not before, and finishes the run; a save that ended
			// the session let it go.
			if strings.Contains(l, "ended") {
				leaseFree(t, w, thread)
			} else {
				heldOff(t, w, thread)
				endStalledLease(t, w, thread, processLease)
			}
			heir := startReplica(t, w, "drive", "CHILD_THREAD="+thread, "CHILD_USER=U_BOB")
			if l := heir.line(t); !strings.HasPrefix(l, "DONE") {
				t.Fatalf("heir said %q, want DONE", l)
			}
			if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(victim.stdin)
			if l := victim.line(t); !strings.HasPrefix(l, "DONE") {
				t.Errorf("victim said %q after it went on, want DONE (the run the heir finished)", l)
			}
			got := []int{tg.Count("GET /lookup"), tg.Count("POST /deploy"), tg.Count("POST /delete")}
			if got[0] != 1 || got[1] != 1 || got[2] != 0 {
				t.Errorf("executions lookup/deploy/delete = %v, want [1 1 0]", got)
			}
		})
	}
}

// TestKilledDuringANonIdempotentCall kills a replica while its POST is
// in flight: the effect happened, but no save says so. The heir must not
// run the call again on its own; it asks, and a person who checked marks
// it done.
func TestKilledDuringANonIdempotentCall(t *testing.T) {
	t.Parallel()
	w, tg := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	tg.HoldNext("POST /deploy")
	victim := startReplica(t, w, "drive", "CHILD_THREAD=th", "CHILD_USER=U_BOB")
	select {
	case <-tg.Arrived:
	case l := <-victim.lines:
		t.Fatalf("the deploy call never arrived; the replica said %q", l)
	case <-time.After(30 * time.Second):
		t.Fatal("the deploy call never arrived")
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	endLease(t, w, "th")

	heir := startReplica(t, w, "drive", "CHILD_THREAD=th", "CHILD_USER=U_BOB", "CHILD_ON_UNKNOWN=mark_done")
	l := heir.line(t)
	if !strings.HasPrefix(l, "DONE") || !strings.Contains(l, "user U_BOB checked and marked it as done") {
		t.Errorf("heir said %s, want DONE with the call marked done", l)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1: a call cut off mid-way must not be re-run unasked", n)
	}
	// The trail shows the execution, its outcome unknown, the person's
	// "mark done" and the outcome it settled.
	want := []string{
		"execution lookup", "outcome lookup done",
		"decision deploy approve", "decision delete reject",
		"execution deploy", "outcome deploy unknown",
		"decision deploy mark_done", "outcome deploy marked_done",
	}
	if got := trail(t, w); !slices.Equal(got, want) {
		t.Errorf("trail = %q\nwant %q", got, want)
	}
}

// TestCardsSurviveACrash: the bot dies after saving a pause but before
// showing its approval cards. The next process to drive the thread shows
// them — a paused thread nobody can see would never be decided.
func TestCardsSurviveACrash(t *testing.T) {
	t.Parallel()
	w, _ := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	victim := startReplica(t, w, "card-then-die", "CHILD_THREAD=th")
	if l := victim.line(t); l != "CARD" {
		t.Fatalf("victim said %q, want CARD", l)
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	leaseFree(t, w, "th") // the pause's save let it go
	heir := startReplica(t, w, "show-cards", "CHILD_THREAD=th")
	if l := heir.line(t); l != "CARDS deploy,delete" {
		t.Errorf("heir said %q, want both cards shown, once each", l)
	}
}
