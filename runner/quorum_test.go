package runner_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// Four eyes: deploy needs two of Bob, Carol and Dave, and nobody approves
// their own request; delete needs anyone's one approval, and offers no
// edit.
const quorumYAML = `
tools:
  lookup: {approval: never}
  deploy: {approvers: [U0BOB, U0CAROL, U0DAVE], self_approval: false, approvals_required: 2, confirm: true}
  delete: {decisions: [approve, reject]}
`

// quorumStores builds services over each kind of store — Redis, and the
// in-memory stores — that share one store per test, as replicas do.
var quorumStores = []struct {
	name string
	new  func(t *testing.T) (graph.Store, runner.Store)
}{
	{"redis", func(t *testing.T) (graph.Store, runner.Store) {
		s := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: "runner-quorum-" + randomHex()})
		return s, s
	}},
	{"memory", func(t *testing.T) (graph.Store, runner.Store) {
		cps := graph.NewMemoryStore(graph.MemoryOptions{})
		return cps, runner.NewMemoryStore(nil).WithCheckpoints(cps)
	}},
}

// quorumWorld returns a function that builds one more replica over
// stores, under quorumYAML, with the tools calling tg.
func quorumWorld(t *testing.T, checkpoints graph.Store, store runner.Store, tg *target) func(rep runner.Reporter) *runner.Service {
	policy, err := tools.ParsePolicy([]byte(quorumYAML))
	if err != nil {
		t.Fatal(err)
	}
	http := tools.NewHTTPRequest(tools.HTTPOptions{})
	reg, err := tools.NewRegistry(policy, named{http, "lookup"}, named{http, "deploy"}, named{http, "delete"})
	if err != nil {
		t.Fatal(err)
	}
	return func(rep runner.Reporter) *runner.Service {
		if rep == nil {
			rep = &recorder{}
		}
		a, err := agent.New(&agenttest.Planner{Plan: plan(tg.URL)}, reg, checkpoints, agent.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return runner.New(a, store, rep, runner.Options{LeaseTTL: time.Second})
	}
}

// eachStore runs test once per kind of store.
func eachStore(t *testing.T, test func(t *testing.T, replica func(rep runner.Reporter) *runner.Service, tg *target)) {
	for _, st := range quorumStores {
		t.Run(st.name, func(t *testing.T) {
			tg := newTarget(t)
			checkpoints, store := st.new(t)
			test(t, quorumWorld(t, checkpoints, store, tg), tg)
		})
	}
}

func refusedWith(err error, want string) bool {
	var refused *runner.RefusedError
	return errors.As(err, &refused) && strings.Contains(refused.Why, want)
}

// gateEvent returns the last event of kind about tool that carries a gate.
func (r *recorder) gateEvent(kind runner.EventKind, tool string) (runner.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if e := r.events[i]; e.Kind == kind && e.Call != nil && e.Call.Tool == tool && e.Gate != nil {
			return e, true
		}
	}
	return runner.Event{}, false
}

// Two approvals decide deploy: the requester's and an outsider's clicks
// count for nothing, a second click of Bob's counts once, and the call
// runs once, after Carol's, with both names on the decision.
func TestQuorumOfTwo(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, replica func(runner.Reporter) *runner.Service, tg *target) {
		ctx := context.Background()
		rep := &recorder{}
		svc := replica(rep)
		startIn(t, svc, "C1", "U0ALICE")
		deploy := waitingCall(t, svc, "th", "deploy")
		if e, ok := rep.gateEvent(runner.ApprovalNeeded, "deploy"); !ok || e.Gate.Required != 2 || !e.Gate.Confirm || len(e.Gate.Approvals) != 0 ||
			!e.Gate.Offers(agent.Edit) || strings.Join(e.Gate.StillToApprove(), ",") != "U0BOB,U0CAROL,U0DAVE" {
			t.Fatalf("the card's gate = %+v, %v; want 2 required, confirm, no approvals yet, Bob, Carol and Dave to approve", e.Gate, ok)
		}

		if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0ALICE")); !refusedWith(err, "may not approve it yourself") {
			t.Errorf("Decide(requester approves) = %v, want a refusal", err)
		}
		if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0MALLORY")); !refusedWith(err, "only user U0BOB") {
			t.Errorf("Decide(outsider approves) = %v, want a refusal", err)
		}
		if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0BOB")); err != nil {
			t.Fatalf("Decide(Bob approves) = %v", err)
		}
		if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0BOB")); !refusedWith(err, "approved this call already (1 of 2 approvals); it needs 1 more approval") {
			t.Errorf("Decide(Bob approves again) = %v, want a refusal that says so", err)
		}
		if err := svc.Drive(ctx, "th"); err != nil {
			t.Fatal(err)
		}
		if n := tg.Count("POST /deploy"); n != 0 {
			t.Fatalf("deploy ran %d times after one approval of two", n)
		}
		e, ok := rep.gateEvent(runner.ApprovalProgress, "deploy")
		if !ok || len(e.Gate.Approvals) != 1 || e.Gate.Approvals[0].By != "U0BOB" || e.Gate.Missing() != 1 ||
			strings.Join(e.Gate.StillToApprove(), ",") != "U0CAROL,U0DAVE" {
			t.Fatalf("progress = %+v, %v; want Bob's approval, one more from Carol or Dave", e.Gate, ok)
		}
		// Driving again shows nothing new.
		before := len(rep.kinds())
		if err := svc.Drive(ctx, "th"); err != nil {
			t.Fatal(err)
		}
		if got := rep.kinds()[before:]; len(got) != 0 {
			t.Errorf("a second drive reported %v", got)
		}

		if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0CAROL")); err != nil {
			t.Fatalf("Decide(Carol approves) = %v", err)
		}
		var lost *runner.AlreadyDecidedError
		if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0DAVE")); !errors.As(err, &lost) ||
			strings.Join(lost.Decision.Approvers(), ",") != "U0BOB,U0CAROL" {
			t.Errorf("Decide(Dave, after the quorum) = %v, want already approved by Bob and Carol", err)
		}
		if err := svc.Drive(ctx, "th"); err != nil {
			t.Fatal(err)
		}
		if n := tg.Count("POST /deploy"); n != 1 {
			t.Errorf("deploy ran %d times, want 1", n)
		}
		decided, ok := rep.gateEventOrCall(runner.CallDecided, "deploy")
		if !ok || decided.Decision == nil || strings.Join(decided.Decision.Approvers(), ",") != "U0BOB,U0CAROL" {
			t.Errorf("the decided call = %+v; want it approved by Bob and Carol", decided)
		}
	})
}

// gateEventOrCall returns the call of the last event of kind about tool.
func (r *recorder) gateEventOrCall(kind runner.EventKind, tool string) (agent.Call, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if e := r.events[i]; e.Kind == kind && e.Call != nil && e.Call.Tool == tool {
			return *e.Call, true
		}
	}
	return agent.Call{}, false
}

// Approvers click all at once on several replicas, each twice, with an
// outsider and the requester among them: the call is decided once, by
// two distinct approvers, and runs once.
func TestQuorumRacingApprovals(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, replica func(runner.Reporter) *runner.Service, tg *target) {
		ctx := context.Background()
		svc := replica(nil)
		startIn(t, svc, "C1", "U0ALICE")
		deploy := waitingCall(t, svc, "th", "deploy")
		people := []string{"U0BOB", "U0CAROL", "U0DAVE", "U0MALLORY", "U0ALICE"}
		replicas := []*runner.Service{svc, replica(nil), replica(nil)}
		var start, done sync.WaitGroup
		start.Add(1)
		const n = 10
		errs := make([]error, n)
		for i := range n {
			done.Add(1)
			go func() {
				defer done.Done()
				r := replicas[i%len(replicas)]
				start.Wait()
				errs[i] = r.Decide(ctx, inChannel(deploy, agent.Approve, people[i%len(people)]))
				if errs[i] == nil {
					errs[i] = r.Drive(ctx, "th")
				}
			}()
		}
		start.Done()
		done.Wait()
		for i, err := range errs {
			var lost *runner.AlreadyDecidedError
			var refused *runner.RefusedError
			if err != nil && !errors.As(err, &lost) && !errors.As(err, &refused) {
				t.Errorf("click %d of %s: %v", i, people[i%len(people)], err)
			}
		}
		var res *graph.Result[agent.State]
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			if res, err = svc.State(ctx, "th"); err != nil {
				t.Fatal(err)
			}
			if c, ok := res.State.Call(deploy.Key); ok && c.Status.Settled() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("deploy was not settled: %+v", res.State.Calls)
			}
			_ = svc.Drive(ctx, "th")
			time.Sleep(20 * time.Millisecond)
		}
		if n := tg.Count("POST /deploy"); n != 1 {
			t.Errorf("deploy ran %d times, want 1", n)
		}
		c, _ := res.State.Call(deploy.Key)
		approvers := c.Decision.Approvers()
		if len(approvers) != 2 || approvers[0] == approvers[1] {
			t.Fatalf("deploy approved by %v, want two distinct people", approvers)
		}
		for _, a := range approvers {
			if a == "U0MALLORY" || a == "U0ALICE" {
				t.Errorf("deploy approved by %v: %s may not approve it", approvers, a)
			}
		}
	})
}

// An edit after one approval resets it: the old card's approval no
// longer counts or applies, the call waits with the edited arguments, and
// it runs with them once two people approve them.
func TestQuorumEditResetsTheApprovals(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, replica func(runner.Reporter) *runner.Service, tg *target) {
		ctx := context.Background()
		rep := &recorder{}
		svc := replica(rep)
		startIn(t, svc, "C1", "U0ALICE")
		deploy := waitingCall(t, svc, "th", "deploy")
		if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0BOB")); err != nil {
			t.Fatal(err)
		}
		edit := inChannel(deploy, agent.Edit, "U0CAROL")
		edit.Args = []byte(fmt.Sprintf(`{"method":"POST","url":%q,"body":"v3"}`, tg.URL+"/deploy-edited"))
		if err := svc.Decide(ctx, edit); err != nil {
			t.Fatalf("Decide(Carol edits) = %v", err)
		}
		if err := svc.Drive(ctx, "th"); err != nil {
			t.Fatal(err)
		}
		edited := waitingCall(t, svc, "th", "deploy")
		if edited.Revision != 1 || edited.EditedBy != "U0CAROL" || !strings.Contains(string(edited.RunArgs()), "deploy-edited") {
			t.Fatalf("after the edit: %+v; want it waiting in revision 1 with Carol's arguments", edited)
		}
		e, ok := rep.gateEvent(runner.ApprovalProgress, "deploy")
		if !ok || e.Call.Revision != 1 || len(e.Gate.Approvals) != 0 {
			t.Fatalf("progress after the edit = %+v, %v; want revision 1 with no approvals", e.Gate, ok)
		}
		if c, ok := rep.gateEventOrCall(runner.CallDecided, "deploy"); ok {
			t.Errorf("the edit was shown as a decision: %+v", c.Decision)
		}
		// Dave approves from the card as it was before the edit.
		if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0DAVE")); !errors.Is(err, runner.ErrNotPending) {
			t.Errorf("Decide(approval of the old arguments) = %v, want ErrNotPending", err)
		}
		if err := svc.Decide(ctx, inChannel(edited, agent.Approve, "U0BOB")); err != nil {
			t.Fatalf("Decide(Bob approves the edit) = %v", err)
		}
		if err := svc.Drive(ctx, "th"); err != nil {
			t.Fatal(err)
		}
		if n := tg.Count("POST /deploy-edited") + tg.Count("POST /deploy"); n != 0 {
			t.Fatalf("deploy ran %d times after one approval of the edited arguments", n)
		}
		if err := svc.Decide(ctx, inChannel(edited, agent.Approve, "U0DAVE")); err != nil {
			t.Fatalf("Decide(Dave approves the edit) = %v", err)
		}
		if err := svc.Drive(ctx, "th"); err != nil {
			t.Fatal(err)
		}
		if a, b := tg.Count("POST /deploy-edited"), tg.Count("POST /deploy"); a != 1 || b != 0 {
			t.Errorf("the edited deploy ran %d times and the original %d; want 1 and 0", a, b)
		}
	})
}

// One rejection ends a quorum in progress.
func TestQuorumOneRejectionEndsIt(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, replica func(runner.Reporter) *runner.Service, tg *target) {
		ctx := context.Background()
		svc := replica(nil)
		startIn(t, svc, "C1", "U0ALICE")
		deploy := waitingCall(t, svc, "th", "deploy")
		if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0BOB")); err != nil {
			t.Fatal(err)
		}
		if err := svc.Decide(ctx, inChannel(deploy, agent.Reject, "U0CAROL")); err != nil {
			t.Fatalf("Decide(Carol rejects) = %v", err)
		}
		var lost *runner.AlreadyDecidedError
		if err := svc.Decide(ctx, inChannel(deploy, agent.Approve, "U0DAVE")); !errors.As(err, &lost) || lost.Decision.Kind != agent.Reject {
			t.Errorf("Decide(Dave approves after the rejection) = %v, want already rejected", err)
		}
		if err := svc.Drive(ctx, "th"); err != nil {
			t.Fatal(err)
		}
		if n := tg.Count("POST /deploy"); n != 0 {
			t.Errorf("a rejected deploy ran %d times", n)
		}
	})
}

// decisions: [approve, reject] offers no edit: the gate leaves it out,
// a form cannot be opened for it, and a forged edit is refused.
func TestDecisionsWithoutEdit(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, replica func(runner.Reporter) *runner.Service, tg *target) {
		ctx := context.Background()
		rep := &recorder{}
		svc := replica(rep)
		startIn(t, svc, "C1", "U0ALICE")
		del := waitingCall(t, svc, "th", "delete")
		if e, ok := rep.gateEvent(runner.ApprovalNeeded, "delete"); !ok || e.Gate.Offers(agent.Edit) || !e.Gate.Offers(agent.Reject) || e.Gate.Confirm {
			t.Errorf("delete's gate = %+v, %v; want approve and reject, no edit, no confirmation", e.Gate, ok)
		}
		if _, err := svc.Check(ctx, inChannel(del, agent.Edit, "U0BOB")); !refusedWith(err, "the policy offers only approve and reject for delete, not edit") {
			t.Errorf("Check(edit) = %v, want a refusal", err)
		}
		forged := inChannel(del, agent.Edit, "U0BOB")
		forged.Args = []byte(fmt.Sprintf(`{"method":"POST","url":%q}`, tg.URL+"/elsewhere"))
		if err := svc.Decide(ctx, forged); !refusedWith(err, "not edit") {
			t.Errorf("Decide(forged edit) = %v, want a refusal", err)
		}
		if err := svc.Decide(ctx, inChannel(del, agent.Approve, "U0BOB")); err != nil {
			t.Fatalf("Decide(approve) = %v", err)
		}
		if err := svc.Drive(ctx, "th"); err != nil {
			t.Fatal(err)
		}
		if a, b := tg.Count("POST /delete"), tg.Count("POST /elsewhere"); a != 1 || b != 0 {
			t.Errorf("delete ran %d times and the forged call %d; want 1 and 0", a, b)
		}
	})
}

// TestQuorumApprovalOnAnotherReplicaBeforeTheCardIsRecorded: a run pauses
// on a call that needs two approvals, in a replica whose last save let go
// of the lease before it showed the card; the first approval reaches
// another replica before the first has recorded that it showed it. That
// replica does not post a second card, nor leave the count to the
// recovery wake-up: it waits for the first replica's record, then shows
// the approval on the card that replica posted.
func TestQuorumApprovalOnAnotherReplicaBeforeTheCardIsRecorded(t *testing.T) {
	defer runner.SetRecordAfter(time.Hour)()
	ctx := context.Background()
	tg := newTarget(t)
	rdb := redistest.Client(t)
	prefix := "runner-quorum-" + randomHex()
	store := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	replica := quorumWorld(t, store, store, tg)
	repA, repB := &recorder{}, &recorder{}
	a, b := replica(repA), replica(repB)
	startIn(t, a, "C1", "U0ALICE")
	if n := repA.cards("deploy"); n != 1 {
		t.Fatalf("the first replica showed %d deploy cards, want 1", n)
	}
	deploy := waitingCall(t, a, "th", "deploy")
	if err := b.Decide(ctx, inChannel(deploy, agent.Approve, "U0BOB")); err != nil {
		t.Fatalf("Decide(Bob approves) = %v", err)
	}
	// The first replica records what it showed once the other holds the
	// thread's lease: after that one has read the thread's records.
	// (A drive that does not wait may come and go unseen: the records
	// are written once it has returned, all the same.)
	lease := prefix + ":{th}:lease"
	driven, recorded := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			n, err := rdb.Exists(ctx, lease).Result()
			if err != nil {
				recorded <- err
				return
			}
			if n == 1 {
				break
			}
			select {
			case <-driven:
			case <-time.After(5 * time.Millisecond):
				continue
			}
			break
		}
		recorded <- a.FlushRecords(ctx)
	}()
	err := b.Drive(ctx, "th")
	close(driven)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-recorded; err != nil {
		t.Fatal(err)
	}
	if n := repB.cards("deploy"); n != 0 {
		t.Errorf("the replica that took the approval posted %d more deploy cards; the first replica had posted it", n)
	}
	e, ok := repB.gateEvent(runner.ApprovalProgress, "deploy")
	if !ok || len(e.Gate.Approvals) != 1 || e.Gate.Approvals[0].By != "U0BOB" {
		t.Fatalf("the replica that took the approval showed progress %+v, %v; want Bob's approval on the card", e.Gate, ok)
	}
	// Shown once: a later drive shows nothing more.
	before := len(repA.kinds()) + len(repB.kinds())
	if err := a.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if err := b.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if n := len(repA.kinds()) + len(repB.kinds()); n != before {
		t.Errorf("later drives showed %v and %v, want nothing more", repA.kinds(), repB.kinds())
	}
}

// A card is shown "again" when the process that shows it finds the
// thread paused with the card not recorded: the one that showed it may
// have died between posting it and recording it, and the front end looks
// for it before posting another (Event.Again). The card of a round the
// run has just begun is not: nobody can have shown it. (Serial:
// SetRecordAfter.)
func TestCardShownAgainSaysSo(t *testing.T) {
	defer runner.SetRecordAfter(time.Hour)() // the first replica dies before recording
	ctx := context.Background()
	tg := newTarget(t)
	store := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: "runner-again-" + randomHex()})
	replica := quorumWorld(t, store, store, tg)
	repA, repB := &recorder{}, &recorder{}
	a, b := replica(repA), replica(repB)
	startIn(t, a, "C1", "U0ALICE")
	first := repA.eventsOf(runner.ApprovalNeeded)
	if len(first) == 0 {
		t.Fatal("the replica whose run paused showed no card")
	}
	for _, e := range first {
		if e.Again {
			t.Errorf("the replica whose run paused showed the card of %s as shown again", e.Call.Tool)
		}
	}
	if err := b.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	again := repB.eventsOf(runner.ApprovalNeeded)
	if len(again) != len(first) {
		t.Fatalf("the replica that found the cards unrecorded showed %d, want %d", len(again), len(first))
	}
	for i, e := range again {
		if !e.Again || e.Call.Key != first[i].Call.Key {
			t.Errorf("the replica that found the card of %s unrecorded showed it with Again %v; want the same call's card, shown again", e.Call.Tool, e.Again)
		}
	}
}
