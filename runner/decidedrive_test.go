package runner_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
)

// oneCallWorld is a world whose model asks for one call that needs
// approval, deploy, for anything but talk ("chat:", or a note): the
// click that approves it lets the run go on by itself.
func oneCallWorld(t *testing.T) (world, *target) {
	w, tg := newWorld(t)
	w.oneCall("deploy")
	return w, tg
}

// lookupGatedYAML is the policy under which lookup (GET: idempotent)
// needs approval too.
const lookupGatedYAML = `
tools:
  lookup: {approval: required}
  deploy: {approval: required}
  delete: {approval: required}
`

// oneCall makes w's model ask for one call to tool (deploy, a POST, or
// lookup, a GET, which then needs approval) for anything but talk.
func (w *world) oneCall(tool string) {
	args := fmt.Sprintf(`{"method":"POST","url":%q,"body":"v2"}`, w.base+"/deploy")
	if tool == "lookup" {
		w.policy = lookupGatedYAML
		args = fmt.Sprintf(`{"method":"GET","url":%q}`, w.base+"/lookup")
	}
	w.model = &agenttest.Planner{Plan: func(text string) []llm.ToolCall {
		if strings.HasPrefix(text, "chat:") || strings.Contains(text, "wrote in the thread while the calls waited") {
			return nil
		}
		return []llm.ToolCall{{Name: tool, Arguments: args}}
	}}
}

// claimSaves records what became of each save that carried a click's
// claim (runner.SavedClaim), in order.
type claimSaves struct {
	mu       sync.Mutex
	outcomes []runner.ClaimOutcome
	// onSaved, if set, is called after a save that wrote its claim.
	onSaved func()
}

func (c *claimSaves) wrap(inner graph.Store) graph.Store { return claimSaveStore{inner, c} }

func (c *claimSaves) list() []runner.ClaimOutcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.outcomes)
}

// saved reports whether a save has carried a claim and written it.
func (c *claimSaves) saved() bool { return slices.Contains(c.list(), runner.ClaimSaved) }

type claimSaveStore struct {
	graph.Store
	seen *claimSaves
}

func (s claimSaveStore) Save(ctx context.Context, cp *graph.Checkpoint) error {
	sc := runner.SavedClaimOf(ctx)
	before := true
	if sc != nil {
		_, before = sc.Answered()
	}
	err := s.Store.Save(ctx, cp)
	if !before {
		if r, ok := sc.Answered(); ok {
			s.seen.mu.Lock()
			s.seen.outcomes = append(s.seen.outcomes, r.Outcome)
			s.seen.mu.Unlock()
			if r.Outcome == runner.ClaimSaved && s.seen.onSaved != nil {
				s.seen.onSaved()
			}
		}
	}
	return err
}

// clicked is what DecideAndDrive told the person, and whether the tool
// had been called by then.
type clicked struct {
	err       error
	toolCalls int
}

// decideAndDrive runs svc.DecideAndDrive and returns what claimed was
// told, and when, and what the call returned.
func decideAndDrive(svc *runner.Service, tg *target, d runner.Decision) (clicked, error) {
	var got clicked
	n := 0
	err := svc.DecideAndDrive(context.Background(), d, func(err error) {
		n++
		got = clicked{err: err, toolCalls: tg.Count("POST /deploy")}
	})
	if n != 1 {
		return got, fmt.Errorf("claimed was called %d times, want once", n)
	}
	return got, err
}

// TestDecideAndDriveClaimsWithTheSave: the click that approves the only
// call claims it with the save that marks it running — one step, not
// two — and the person is answered before the call is sent; the card
// says who approved it only after that save; the call runs once, and the
// audit trail has the decision, then the execution, chained intact.
func TestDecideAndDriveClaimsWithTheSave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := oneCallWorld(t)
	seen := &claimSaves{}
	w.checkpoints = seen.wrap
	var mu sync.Mutex
	var window []string // events between the claim's save and the call
	var shown *runner.Event
	rep := &recorder{}
	watch := runner.ReporterFunc(func(ctx context.Context, e runner.Event) error {
		if seen.saved() && tg.Count("POST /deploy") == 0 {
			mu.Lock()
			window = append(window, e.Kind.String())
			if shown == nil && e.Call != nil && e.Call.Decision != nil {
				shown = &e
			}
			mu.Unlock()
		}
		return rep.Report(ctx, e)
	})
	svc, _ := w.service(t, watch, 5*time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatal(err)
	}
	c := waitingCall(t, svc, "th", "deploy")

	got, err := decideAndDrive(svc, tg, decision("th", c, agent.Approve, "U_BOB"))
	if err != nil || got.err != nil {
		t.Fatalf("DecideAndDrive() = %v, told %v; want nil, nil", err, got.err)
	}
	if got.toolCalls != 0 {
		t.Errorf("the person was answered after the call was sent (%d calls)", got.toolCalls)
	}
	if o := seen.list(); !slices.Equal(o, []runner.ClaimOutcome{runner.ClaimSaved}) {
		t.Errorf("saves carrying the claim: %v, want one that saved", o)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	// The card shows who approved once the save holds it, and nothing
	// more stands between that save and the call than on any resume:
	// the call's start (its card's update).
	if !slices.Equal(window, []string{"call_started"}) {
		t.Errorf("events between the save and the call: %q, want the call's start alone", window)
	}
	if shown == nil || shown.Call.Decision.By != "U_BOB" || shown.Call.Decision.Kind != agent.Approve {
		t.Errorf("the call's start shows decision %+v, want approved by U_BOB", shown)
	}
	if kinds := rep.kinds(); slices.Contains(kinds, "call_decided deploy") {
		t.Errorf("events %q: the decision was shown before the save that holds it", kinds)
	}
	res, err := svc.State(ctx, "th")
	if err != nil || res.Status() != graph.Done {
		t.Fatalf("State() = %v, %v; want done", res, err)
	}
	want := []string{"decision deploy approve", "execution deploy", "outcome deploy done"}
	if got := trail(t, w); !slices.Equal(got, want) {
		t.Errorf("trail = %q\nwant %q", got, want)
	}
}

// TestDecideAndDriveClicksAtOnce: two processes, both with the thread
// cached, approve the only call at the same moment, many times over. One
// wins and runs the call, once; the other is told who decided.
func TestDecideAndDriveClicksAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := oneCallWorld(t)
	a, _ := w.service(t, nil, 5*time.Second)
	b, _ := w.service(t, nil, 5*time.Second)
	const threads = 8
	for i := range threads {
		thread := fmt.Sprintf("th-%d", i)
		if err := a.Start(ctx, runner.StartRequest{Thread: thread, Requester: "U_ALICE", Text: "ship"}); err != nil {
			t.Fatal(err)
		}
		c := waitingCall(t, b, thread, "deploy") // b has it cached too
		var wg sync.WaitGroup
		start := make(chan struct{})
		got := make([]clicked, 2)
		errs := make([]error, 2)
		for j, svc := range []*runner.Service{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[j], errs[j] = decideAndDrive(svc, tg, decision(thread, c, agent.Approve, []string{"U_A", "U_B"}[j]))
			}()
		}
		close(start)
		wg.Wait()
		oneWon(t, thread, got, errs, func(j int) string { return []string{"U_A", "U_B"}[j] })
		// The winner's drive ran the call; wait for its end.
		res, err := finish(ctx, a, thread, "U_BOB", agent.Approve, 20*time.Second)
		if err != nil || res.Status() != graph.Done {
			t.Fatalf("%s: %v, %v", thread, res, err)
		}
	}
	if n := tg.Count("POST /deploy"); n != threads {
		t.Errorf("deploy ran %d times over %d threads, want once each", n, threads)
	}
}

// TestDecideAndDriveWhileLeased: a click while another process holds the
// thread's lease is claimed, and told so, but nothing runs here: the
// holder applies it when it lets go.
func TestDecideAndDriveWhileLeased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := oneCallWorld(t)
	seen := &claimSaves{}
	w.checkpoints = seen.wrap
	svc, store := w.service(t, nil, 5*time.Second)
	holder, _ := w.service(t, nil, 5*time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatal(err)
	}
	c := waitingCall(t, svc, "th", "deploy")
	token, err := store.AcquireLease(ctx, "th", "other", 5*time.Second)
	if err != nil || token == "" {
		t.Fatalf("AcquireLease() = %q, %v", token, err)
	}
	got, err := decideAndDrive(svc, tg, decision("th", c, agent.Approve, "U_BOB"))
	if err != nil || got.err != nil {
		t.Fatalf("DecideAndDrive() = %v, told %v; want nil, nil", err, got.err)
	}
	if o := seen.list(); !slices.Equal(o, []runner.ClaimOutcome{runner.ClaimBusy}) {
		t.Errorf("saves carrying the claim: %v, want one that found the lease held", o)
	}
	if n := tg.Count("POST /deploy"); n != 0 {
		t.Fatalf("deploy ran %d times while another process held the lease", n)
	}
	res, err := svc.State(ctx, "th")
	if err != nil || res.Status() != graph.Paused {
		t.Fatalf("State() = %v, %v; want still paused", res, err)
	}
	// The holder lets go and, as it does, drives the claim it finds.
	if err := store.ReleaseLease(ctx, "th", token); err != nil {
		t.Fatal(err)
	}
	if err := holder.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if res, err := svc.State(ctx, "th"); err != nil || res.Status() != graph.Done {
		t.Fatalf("State() = %v, %v; want done", res, err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	want := []string{"decision deploy approve", "execution deploy", "outcome deploy done"}
	if got := trail(t, w); !slices.Equal(got, want) {
		t.Errorf("trail = %q\nwant %q", got, want)
	}
}

// TestDecideAndDriveOnAStaleCache: the thread moved on in another process
// since this one cached it (a note was added). The save that carries the
// claim writes nothing; the decision is checked against the stored state
// and claimed as Decide does, and the call runs once.
func TestDecideAndDriveOnAStaleCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := oneCallWorld(t)
	w.policy = approversYAML
	seen := &claimSaves{}
	w.checkpoints = seen.wrap
	svc, _ := w.service(t, nil, 5*time.Second)
	other, _ := w.service(t, nil, 5*time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	c := waitingCall(t, svc, "th", "deploy")
	before, _ := svc.State(ctx, "th")
	// Someone who may not decide writes in the thread: kept as a note,
	// in a new checkpoint, by another process.
	err := other.Reply(ctx, runner.Message{Thread: "th", Team: "T1", Channel: "C1", By: "U0DAVE", Text: "chat: lgtm"})
	var refused *runner.RefusedError
	if !errors.As(err, &refused) || !refused.Noted {
		t.Fatalf("Reply() = %v, want a note", err)
	}
	if after, _ := other.State(ctx, "th"); after.Checkpoint.ID == before.Checkpoint.ID {
		t.Fatal("the note did not move the thread on")
	}
	got, err := decideAndDrive(svc, tg, inChannel(c, agent.Approve, "U0BOB"))
	if err != nil || got.err != nil {
		t.Fatalf("DecideAndDrive() = %v, told %v; want nil, nil", err, got.err)
	}
	if o := seen.list(); !slices.Equal(o, []runner.ClaimOutcome{runner.ClaimStale}) {
		t.Errorf("saves carrying the claim: %v, want one that found the cache stale", o)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	if res, err := svc.State(ctx, "th"); err != nil || res.Status() != graph.Done {
		t.Fatalf("State() = %v, %v; want done", res, err)
	}
	want := []string{"note ", "decision deploy approve", "execution deploy", "outcome deploy done"}
	if got := trail(t, w); !slices.Equal(got, want) {
		t.Errorf("trail = %q\nwant %q", got, want)
	}
}

// TestTwoProcessesDecideAndDriveOneCall: two replicas, each with the
// thread cached, click Approve on its only call at the same moment, as
// the Slack handler takes a click. One wins and runs the call, once; the
// other is told who decided.
func TestTwoProcessesDecideAndDriveOneCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := oneCallWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	svc, _ := w.service(t, nil, time.Second)
	for i := range 3 {
		thread := fmt.Sprintf("th-%d", i)
		if err := svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: "U_ALICE", Text: "ship"}); err != nil {
			t.Fatal(err)
		}
		key := waitingCall(t, svc, thread, "deploy").Key
		at := strconv.FormatInt(time.Now().Add(time.Second).UnixNano(), 10)
		env := []string{"CHILD_THREAD=" + thread, "CHILD_CALL=" + key, "CHILD_ONE_CALL=deploy", "CHILD_START_AT=" + at}
		a := startReplica(t, w, "decide-drive", append(env, "CHILD_USER=U_A")...)
		b := startReplica(t, w, "decide-drive", append(env, "CHILD_USER=U_B")...)
		got := map[string]string{"U_A": a.line(t), "U_B": b.line(t)}
		winner := a
		switch {
		case got["U_A"] == "WON" && got["U_B"] == "LOST U_A":
		case got["U_B"] == "WON" && got["U_A"] == "LOST U_B":
			winner = b
		default:
			t.Errorf("%s: replicas said %v, want one WON and the other LOST naming the winner", thread, got)
		}
		for _, r := range []*replica{a, b} {
			l := r.line(t)
			if !strings.HasPrefix(l, "END") {
				t.Errorf("%s: replica said %q, want END", thread, l)
			}
			// The winner claimed with the save (outcome 1, ClaimSaved).
			if r == winner && l != fmt.Sprintf("END [%d]", runner.ClaimSaved) {
				t.Errorf("%s: the winner said %q, want its claim written with the save", thread, l)
			}
		}
		if n := tg.Count("POST /deploy"); n != i+1 {
			t.Errorf("%s: deploy ran %d times over %d threads, want once each", thread, n, i+1)
		}
	}
}

// TestKilledRightAfterTheClaimsSave kills a replica (SIGKILL) right after
// the save that claimed a click's decision and marked the call running,
// before the call is sent. The heir recovers the run as after any crash
// there: a call that is not idempotent is not sent again unasked (its
// outcome is unknown, and a person marks it done); an idempotent one is
// run again, once. The audit trail stays chained.
func TestKilledRightAfterTheClaimsSave(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tool, hit string
		runs      int
		onUnknown string
		trail     []string
	}{
		{"deploy", "POST /deploy", 0, "mark_done", []string{
			"decision deploy approve", "execution deploy", "outcome deploy unknown",
			"decision deploy mark_done", "outcome deploy marked_done",
		}},
		{"lookup", "GET /lookup", 1, "", []string{
			"decision lookup approve", "execution lookup", "execution lookup", "outcome lookup done",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			ctx := context.Background()
			w, tg := newWorld(t)
			w.rdb = redis.NewClient(redistest.Options(t))
			w.oneCall(tt.tool)
			svc, _ := w.service(t, nil, time.Second)
			if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
				t.Fatal(err)
			}
			key := waitingCall(t, svc, "th", tt.tool).Key
			victim := startReplica(t, w, "decide-drive-die", "CHILD_THREAD=th", "CHILD_CALL="+key, "CHILD_USER=U_BOB",
				"CHILD_ONE_CALL="+tt.tool, "CHILD_START_AT=0")
			if l := victim.line(t); l != "WON" {
				t.Fatalf("victim said %q, want WON", l)
			}
			if l := victim.line(t); l != "SAVED" {
				t.Fatalf("victim said %q, want SAVED", l)
			}
			if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = victim.cmd.Wait()
			res, err := svc.State(ctx, "th")
			if err != nil || res.Status() != graph.Running {
				t.Fatalf("State() after the kill = %v, %v; want the run saved running", res, err)
			}
			heldOff(t, w, "th")
			endLease(t, w, "th")
			heir := startReplica(t, w, "drive", "CHILD_THREAD=th", "CHILD_USER=U_BOB", "CHILD_ONE_CALL="+tt.tool,
				"CHILD_ON_UNKNOWN="+tt.onUnknown)
			if l := heir.line(t); !strings.HasPrefix(l, "DONE") {
				t.Fatalf("heir said %q, want DONE", l)
			}
			if n := tg.Count(tt.hit); n != tt.runs {
				t.Errorf("%s ran %d times, want %d", tt.tool, n, tt.runs)
			}
			if got := trail(t, w); !slices.Equal(got, tt.trail) {
				t.Errorf("trail = %q\nwant %q", got, tt.trail)
			}
		})
	}
}

// TestStalledRightAfterTheClaimsSave stops a replica (SIGSTOP) right
// after the save that claimed a click's decision, until its lease is
// over; another replica recovers the run (the call's outcome is unknown:
// a person marks it done). The stalled replica then goes on: its lease
// check before the call finds the lease gone, and the call is never
// sent.
func TestStalledRightAfterTheClaimsSave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	w.rdb = redis.NewClient(redistest.Options(t))
	w.oneCall("deploy")
	svc, _ := w.service(t, nil, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship"}); err != nil {
		t.Fatal(err)
	}
	key := waitingCall(t, svc, "th", "deploy").Key
	victim := startReplica(t, w, "decide-drive-stall", "CHILD_THREAD=th", "CHILD_CALL="+key, "CHILD_USER=U_BOB",
		"CHILD_ONE_CALL=deploy", "CHILD_START_AT=0")
	if l := victim.line(t); l != "WON" {
		t.Fatalf("victim said %q, want WON", l)
	}
	if l := victim.line(t); l != "STALLED" {
		t.Fatalf("victim said %q, want STALLED", l)
	}
	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	heldOff(t, w, "th")
	endStalledLease(t, w, "th", processLease)
	heir := startReplica(t, w, "drive", "CHILD_THREAD=th", "CHILD_USER=U_BOB", "CHILD_ONE_CALL=deploy", "CHILD_ON_UNKNOWN=mark_done")
	if l := heir.line(t); !strings.HasPrefix(l, "DONE") || !strings.Contains(l, "marked it as done") {
		t.Fatalf("heir said %q, want DONE with the call marked done", l)
	}
	if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(victim.stdin)
	if l := victim.line(t); !strings.HasPrefix(l, "END") {
		t.Errorf("victim said %q after it went on, want END", l)
	}
	if n := tg.Count("POST /deploy"); n != 0 {
		t.Errorf("deploy ran %d times, want 0: the stalled replica sent it without its lease", n)
	}
	got := trail(t, w)
	if n := len(slices.DeleteFunc(slices.Clone(got), func(e string) bool { return e != "execution deploy" })); n != 1 {
		t.Errorf("trail = %q: the call's execution recorded %d times, want once (the save that claimed it)", got, n)
	}
}

// TestDecideAndDriveAnswersAsDecide: a click the rules refuse, or on a
// card that is no longer pending, is answered as Decide answers it,
// before anything is written or run, and a refusal is audited once; a
// click after the call was decided hears who decided it.
func TestDecideAndDriveAnswersAsDecide(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := oneCallWorld(t)
	w.policy = approversYAML
	seen := &claimSaves{}
	w.checkpoints = seen.wrap
	svc, _ := w.service(t, nil, 5*time.Second)
	startIn(t, svc, "C1", "U0ALICE")
	deploy := waitingCall(t, svc, "th", "deploy")
	before, _ := svc.State(ctx, "th")

	other := inChannel(deploy, agent.Approve, "U0BOB")
	other.Channel = "C2"
	otherTeam := inChannel(deploy, agent.Approve, "U0BOB")
	otherTeam.Team = "T2"
	staleHash := inChannel(deploy, agent.Approve, "U0BOB")
	staleHash.Hash = strings.Repeat("0", 64)
	oldRound := inChannel(deploy, agent.Approve, "U0BOB")
	oldRound.Round = 1
	tests := []struct {
		name    string
		d       runner.Decision
		refused bool
		want    error
	}{
		{"an outsider approves", inChannel(deploy, agent.Approve, "U0MALLORY"), true, nil},
		{"from another channel", other, true, nil},
		{"from another workspace", otherTeam, true, nil},
		{"the requester approves their own", inChannel(deploy, agent.Approve, "U0ALICE"), true, nil},
		{"other arguments", staleHash, false, runner.ErrNotPending},
		{"another round", oldRound, false, runner.ErrNotPending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decideAndDrive(svc, tg, tt.d)
			var refused *runner.RefusedError
			switch {
			case tt.refused && !errors.As(got.err, &refused):
				t.Errorf("told %v, want a refusal", got.err)
			case !tt.refused && !errors.Is(got.err, tt.want):
				t.Errorf("told %v, want %v", got.err, tt.want)
			}
			if !errors.Is(err, got.err) {
				t.Errorf("DecideAndDrive() = %v, want what the person was told (%v)", err, got.err)
			}
		})
	}
	if after, _ := svc.State(ctx, "th"); after.Checkpoint.ID != before.Checkpoint.ID || len(seen.list()) != 0 {
		t.Fatalf("refused clicks moved the thread (%s → %s) or wrote claims %v", before.Checkpoint.ID, after.Checkpoint.ID, seen.list())
	}
	if got, err := decideAndDrive(svc, tg, inChannel(deploy, agent.Approve, "U0BOB")); err != nil || got.err != nil {
		t.Fatalf("Bob's approval = %v, told %v", err, got.err)
	}
	got, _ := decideAndDrive(svc, tg, inChannel(deploy, agent.Approve, "U0CAROL"))
	var lost *runner.AlreadyDecidedError
	if !errors.As(got.err, &lost) || lost.Decision.By != "U0BOB" {
		t.Errorf("Carol's late click was told %v, want already approved by U0BOB", got.err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	want := []string{
		"refusal deploy refused", "refusal deploy refused", "refusal deploy refused", "refusal deploy refused",
		"decision deploy approve", "execution deploy", "outcome deploy done",
	}
	if got := trail(t, w); !slices.Equal(got, want) {
		t.Errorf("trail = %q\nwant %q", got, want)
	}
}

// TestDecideAndDriveClicksAtOnceInOneProcess: ten people click Approve
// on the only call at the same moment, all to one process, many times
// over. One wins and runs the call, once; each of the other nine is told
// who decided — never an error, also when the winner's run saved while
// theirs was about to resume from the pause (the cache moved on under
// them).
func TestDecideAndDriveClicksAtOnceInOneProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := oneCallWorld(t)
	svc, _ := w.service(t, nil, 5*time.Second)
	const threads, clicks = 12, 10
	for i := range threads {
		thread := fmt.Sprintf("th-%d", i)
		if err := svc.Start(ctx, runner.StartRequest{Thread: thread, Requester: "U_ALICE", Text: "ship"}); err != nil {
			t.Fatal(err)
		}
		c := waitingCall(t, svc, thread, "deploy")
		var wg sync.WaitGroup
		start := make(chan struct{})
		got := make([]clicked, clicks)
		errs := make([]error, clicks)
		for j := range clicks {
			wg.Go(func() {
				<-start
				got[j], errs[j] = decideAndDrive(svc, tg, decision(thread, c, agent.Approve, fmt.Sprintf("U_%d", j)))
			})
		}
		close(start)
		wg.Wait()
		oneWon(t, thread, got, errs, func(j int) string { return fmt.Sprintf("U_%d", j) })
		res, err := finish(ctx, svc, thread, "U_BOB", agent.Approve, 20*time.Second)
		if err != nil || res.Status() != graph.Done {
			t.Fatalf("%s: %v, %v", thread, res, err)
		}
	}
	if n := tg.Count("POST /deploy"); n != threads {
		t.Errorf("deploy ran %d times over %d threads, want once each", n, threads)
	}
}

// oneWon checks that exactly one of the clicks on thread won (got[j] is
// what click j was told, errs[j] what DecideAndDrive returned) and that
// each of the others was told who decided: by(j) is click j's person.
func oneWon(t *testing.T, thread string, got []clicked, errs []error, by func(int) string) {
	t.Helper()
	won := -1
	for j := range got {
		var lost *runner.AlreadyDecidedError
		switch {
		case got[j].err == nil && errs[j] == nil:
			if won >= 0 {
				t.Fatalf("%s: clicks %d and %d both won", thread, won, j)
			}
			won = j
		case errors.As(got[j].err, &lost):
		default:
			t.Fatalf("%s: click %d was told %v (returned %v), want that it won or who decided", thread, j, got[j].err, errs[j])
		}
	}
	if won < 0 {
		t.Fatalf("%s: no click won", thread)
	}
	for j := range got {
		var lost *runner.AlreadyDecidedError
		if j != won && (!errors.As(got[j].err, &lost) || lost.Decision.By != by(won)) {
			t.Errorf("%s: click %d was told %v, want that %s decided", thread, j, got[j].err, by(won))
		}
	}
}
