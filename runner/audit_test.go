package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// trail returns the world's audit trail, one "event tool detail" string
// per entry (detail: the decision or the outcome), after checking that
// its hash chain verifies.
func trail(t *testing.T, w world) []string {
	t.Helper()
	store := redisstore.New(w.rdb, redisstore.Options{Prefix: w.prefix})
	ctx := context.Background()
	if rep, err := store.VerifyAudit(ctx); err != nil {
		t.Fatalf("VerifyAudit = %+v, %v", rep, err)
	}
	entries, err := store.AuditEntries(ctx, "", time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		f := e.Fields
		s := f["event"] + " " + f["tool"]
		switch f["event"] {
		case "outcome":
			s += " " + f["outcome"]
		case "decision", "refusal":
			s += " " + f["decision"]
		}
		out = append(out, s)
	}
	return out
}

// Every decision, execution and outcome of a conversation is in the
// trail, in order, chained; executions and outcomes name the call's
// arguments' hash, who decided, who asked and the replica that ran it.
func TestAuditTrailOfAConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, _ := newWorld(t)
	svc, store := w.service(t, nil, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatal(err)
	}
	deploy := waitingCall(t, svc, "th", "deploy")
	if _, err := finish(ctx, svc, "th", "U_BOB", agent.Approve, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"execution lookup", "outcome lookup done",
		"decision deploy approve", "decision delete reject",
		"execution deploy", "outcome deploy done",
	}
	if got := trail(t, w); !slices.Equal(got, want) {
		t.Errorf("trail = %q\nwant %q", got, want)
	}
	entries, _ := store.AuditEntries(ctx, "", time.Time{}, 100)
	for _, e := range entries {
		if e.Fields["tool"] != "deploy" || e.Fields["event"] == "decision" {
			continue
		}
		f := e.Fields
		if f["args_hash"] != deploy.RunHash() || f["by"] != "U_BOB" || f["requester"] != "U_ALICE" || f["replica"] == "" ||
			f["thread"] != "th" || f["call"] != deploy.Key || f["at"] == "" || f["attempt"] != "1" {
			t.Errorf("%s entry = %v; want the call's hash, approver, requester, replica, thread, key, time and attempt", f["event"], f)
		}
	}
}

// failingAuditor is a store whose audit trail refuses entries of one
// event.
type failingAuditor struct {
	runner.Store
	event string
	fail  *atomic.Bool
}

func (f failingAuditor) Audit(ctx context.Context, rec map[string]string) error {
	return f.AuditAll(ctx, []map[string]string{rec})
}

func (f failingAuditor) AuditAll(ctx context.Context, recs []map[string]string) error {
	for _, rec := range recs {
		if f.fail.Load() && rec["event"] == f.event {
			return errors.New("audit trail unavailable")
		}
	}
	return f.Store.AuditAll(ctx, recs)
}

// A call whose execution cannot be written to the audit trail is not
// sent: the run fails and its Retry, once the trail takes entries again,
// runs the call once.
func TestNoCallRunsUnaudited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	var fail atomic.Bool
	fail.Store(true)
	w.auditor = func(s *redisstore.Store) runner.Store { return failingAuditor{s, "execution", &fail} }
	svc, _ := w.service(t, nil, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatal(err)
	}
	res, _ := svc.State(ctx, "th")
	if n := tg.Count("GET /lookup"); n != 0 || res.Status() != graph.Failed {
		t.Fatalf("lookup ran %d times with the trail down, run %s; want not run, failed", n, res.Status())
	}
	fail.Store(false)
	if err := svc.Retry(ctx, runner.Message{Thread: "th", By: "U_ALICE"}); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("GET /lookup"); n != 1 {
		t.Errorf("lookup ran %d times after the retry, want 1", n)
	}
	got := trail(t, w)
	if want := []string{"decision  retry_run", "execution lookup", "outcome lookup done"}; !slices.Equal(got, want) {
		t.Errorf("trail = %q, want %q", got, want)
	}
}

// On a single server a call's execution is written by the save that
// marks it running. A trail that cannot take it fails that save: the call
// is not sent nor saved as running, the run fails, and its Retry, once
// the trail takes entries again, runs the call once.
func TestNoCallRunsUnauditedWithItsSave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	svc, _ := w.service(t, nil, time.Second)
	// An audit stream that is not a stream takes no entries.
	stream := w.prefix + ":audit"
	if err := w.rdb.Set(ctx, stream, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatal(err)
	}
	res, _ := svc.State(ctx, "th")
	if n := tg.Count("GET /lookup"); n != 0 || res.Status() != graph.Failed {
		t.Fatalf("lookup ran %d times with the trail down, run %s; want not run, failed", n, res.Status())
	}
	for _, c := range res.State.Calls {
		if c.Status == agent.Running {
			t.Fatalf("the lookup is saved as running: a retry would take it for a call cut off")
		}
	}
	if err := w.rdb.Del(ctx, stream).Err(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Retry(ctx, runner.Message{Thread: "th", By: "U_ALICE"}); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("GET /lookup"); n != 1 {
		t.Errorf("lookup ran %d times after the retry, want 1", n)
	}
	got := trail(t, w)
	if want := []string{"decision  retry_run", "execution lookup", "outcome lookup done"}; !slices.Equal(got, want) {
		t.Errorf("trail = %q, want %q", got, want)
	}
}

// onceFailingAuditor is a store whose audit trail refuses the first
// entry of one event for one tool.
type onceFailingAuditor struct {
	runner.Store
	event, tool string
	armed       *atomic.Bool
}

func (f onceFailingAuditor) Audit(ctx context.Context, rec map[string]string) error {
	return f.AuditAll(ctx, []map[string]string{rec})
}

func (f onceFailingAuditor) AuditAll(ctx context.Context, recs []map[string]string) error {
	for _, rec := range recs {
		if rec["event"] == f.event && rec["tool"] == f.tool && f.armed.CompareAndSwap(true, false) {
			return errors.New("audit trail unavailable")
		}
	}
	return f.Store.AuditAll(ctx, recs)
}

// A call that BeforeCall stops (its execution cannot be audited) was
// saved as running but never sent: it is approved again, not a call whose
// outcome is unknown. Nobody is shown it running or asked to mark it
// done; the run's Retry sends it, once.
func TestUnsentCallIsApprovedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	var armed atomic.Bool
	armed.Store(true)
	w.auditor = func(s *redisstore.Store) runner.Store { return onceFailingAuditor{s, "execution", "deploy", &armed} }
	rep := &recorder{}
	svc, _ := w.service(t, rep, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatal(err)
	}
	deploy, del := waitingCall(t, svc, "th", "deploy"), waitingCall(t, svc, "th", "delete")
	if err := svc.Decide(ctx, decision("th", deploy, agent.Approve, "U_BOB")); err != nil {
		t.Fatal(err)
	}
	if err := svc.Decide(ctx, script("th", del, "U_BOB", agent.MarkDone)); err != nil {
		t.Fatal(err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if armed.Load() {
		t.Fatal("the deploy's execution was never audited: the test does not test anything")
	}
	res, err := svc.State(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := res.State.Call(deploy.Key)
	if n := tg.Count("POST /deploy"); n != 0 || res.Status() != graph.Failed || c.Status != agent.Approved || c.Attempts != deploy.Attempts {
		t.Fatalf("after the audit failed: deploy ran %d times, run %s, call %s (attempt %d); want not run, failed, approved (attempt %d)",
			n, res.Status(), c.Status, c.Attempts, deploy.Attempts)
	}
	// People heard the call start (its lease check is the last step
	// before the send), then the run fail: never a finished deploy.
	for _, k := range rep.kinds() {
		if k == "call_finished deploy" {
			t.Fatalf("people were shown the unsent deploy finished: %v", rep.kinds())
		}
	}
	if kinds := rep.kinds(); kinds[len(kinds)-1] != "run_failed" {
		t.Fatalf("events %v, want the run's failure last", kinds)
	}

	if err := svc.Retry(ctx, runner.Message{Thread: "th", By: "U_ALICE"}); err != nil {
		t.Fatal(err)
	}
	// Whatever waits now is decided as the script says; a call whose
	// outcome is unknown would be marked done, unsent.
	if _, err := finish(ctx, svc, "th", "U_BOB", agent.MarkDone, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times after the retry, want once", n)
	}
	asked := 0
	for _, k := range rep.kinds() {
		if k == "approval_needed deploy" {
			asked++
		}
	}
	if asked != 1 {
		t.Errorf("people were asked about the deploy %d times (events %v); want once, not again for an unknown outcome", asked, rep.kinds())
	}
	got := trail(t, w)
	var deploys []string
	for _, e := range got {
		if strings.HasSuffix(e, "deploy") || strings.Contains(e, " deploy ") {
			deploys = append(deploys, e)
		}
	}
	if want := []string{"decision deploy approve", "execution deploy", "outcome deploy done"}; !slices.Equal(deploys, want) {
		t.Errorf("the deploy's trail = %q, want %q", deploys, want)
	}
}

// An edited call's execution names the edited arguments' hash, and
// their credentials are masked in every entry, while the call sends them.
func TestAuditOfAnEditMasksCredentials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	svc, store := w.service(t, nil, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatal(err)
	}
	deploy := waitingCall(t, svc, "th", "deploy")
	const secret = "sk-live-0123456789"
	edited := fmt.Sprintf(`{"method":"POST","url":%q,"body":"v3","headers":{"Authorization":"Bearer %s"}}`, w.base+"/deploy", secret)
	d := decision("th", deploy, agent.Edit, "U_BOB")
	d.Args = json.RawMessage(edited)
	d.Hash = ""
	if err := svc.Decide(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := finish(ctx, svc, "th", "U_BOB", agent.Approve, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Fatalf("deploy ran %d times, want 1", n)
	}
	entries, _ := store.AuditEntries(ctx, "", time.Time{}, 100)
	var execution map[string]string
	for _, e := range entries {
		if s := fmt.Sprint(e.Fields); strings.Contains(s, secret) {
			t.Errorf("audit entry shows the credential: %s", s)
		}
		if e.Fields["event"] == "execution" && e.Fields["tool"] == "deploy" {
			execution = e.Fields
		}
	}
	canonical, _ := tools.Canonical(json.RawMessage(edited))
	if execution == nil || execution["edited_args_hash"] != tools.ArgsHash("deploy", canonical) || execution["decision"] != "edit" ||
		execution["args_hash"] != deploy.RunHash() || !strings.Contains(execution["edited_args"], "Bearer ••••••") {
		t.Errorf("deploy's execution entry = %v; want the model's arguments' hash, the edited arguments' hash and the edit, masked", execution)
	}
}

// Every decision's entry carries the arguments it decided with their
// hash: a reject's too, and an edit's both the model's arguments (with
// their hash) and the edited ones (with theirs), each under its own
// name. An approval after an edit names the edited arguments it
// approved. The chain still verifies.
func TestAuditEntriesCarryTheHashOfTheirArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, tg := newWorld(t)
	svc, store := w.service(t, nil, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatal(err)
	}
	deploy := waitingCall(t, svc, "th", "deploy")
	del := waitingCall(t, svc, "th", "delete")
	reject := decision("th", del, agent.Reject, "U_BOB")
	reject.Hash = "" // a reject binds to no hash (the modal's carries none)
	if err := svc.Decide(ctx, reject); err != nil {
		t.Fatal(err)
	}
	edited := fmt.Sprintf(`{"method":"POST","url":%q,"body":"v3"}`, w.base+"/deploy")
	d := decision("th", deploy, agent.Edit, "U_BOB")
	d.Args, d.Hash = json.RawMessage(edited), ""
	if err := svc.Decide(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := finish(ctx, svc, "th", "U_BOB", agent.Approve, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Fatalf("deploy ran %d times, want 1", n)
	}
	trail(t, w) // the chain verifies
	canonical, _ := tools.Canonical(json.RawMessage(edited))
	editedHash := tools.ArgsHash("deploy", canonical)
	entries, _ := store.AuditEntries(ctx, "", time.Time{}, 100)
	var decisions int
	for _, e := range entries {
		f := e.Fields
		if f["event"] != "decision" {
			continue
		}
		decisions++
		switch {
		case f["tool"] == "delete" && f["decision"] == "reject":
			if f["args_hash"] != del.RunHash() || f["args"] == "" || f["edited_args"] != "" || f["edited_args_hash"] != "" {
				t.Errorf("the reject's entry = %v; want the call's arguments and their hash %s, and no edit", f, del.RunHash())
			}
		case f["tool"] == "deploy" && f["decision"] == "edit":
			var args map[string]any
			if f["args_hash"] != deploy.RunHash() || json.Unmarshal([]byte(f["args"]), &args) != nil || args["body"] != "v2" ||
				f["edited_args_hash"] != editedHash || !strings.Contains(f["edited_args"], `"v3"`) {
				t.Errorf("the edit's entry = %v; want the model's arguments (v2) with hash %s and the edited ones (v3) with hash %s",
					f, deploy.RunHash(), editedHash)
			}
		default:
			t.Errorf("unexpected decision entry %v", f)
		}
		if _, ok := f["hash"]; !ok || f["hash"] == f["args_hash"] || f["hash"] == f["edited_args_hash"] {
			t.Errorf("entry %v: want \"hash\" to be the chain's own hash, not an arguments' hash", f)
		}
	}
	if decisions != 2 {
		t.Errorf("%d decision entries, want 2 (the reject, the edit)", decisions)
	}
}

// A call that BeforeCall stopped (its execution could not be audited, once)
// is sent again by the schedule, without anyone's click: it runs once, the
// thread shows its result and never a failed run or an unknown outcome.
func TestUnsentCallIsRetriedWithoutAClick(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, tg := newWorld(t)
	w.schedule = true
	var armed atomic.Bool
	armed.Store(true)
	w.auditor = func(s *redisstore.Store) runner.Store { return onceFailingAuditor{s, "execution", "deploy", &armed} }
	rep := &recorder{}
	svc, _ := w.service(t, rep, time.Second)
	if err := svc.Start(ctx, runner.StartRequest{Thread: "th", Requester: "U_ALICE", Text: "ship v2"}); err != nil {
		t.Fatal(err)
	}
	deploy, del := waitingCall(t, svc, "th", "deploy"), waitingCall(t, svc, "th", "delete")
	if err := svc.Decide(ctx, decision("th", deploy, agent.Approve, "U_BOB")); err != nil {
		t.Fatal(err)
	}
	if err := svc.Decide(ctx, script("th", del, "U_BOB", agent.Approve)); err != nil {
		t.Fatal(err)
	}
	if err := svc.Drive(ctx, "th"); err != nil {
		t.Fatal(err)
	}
	if armed.Load() {
		t.Fatal("the deploy's execution was never audited: the test does not test anything")
	}
	if n := tg.Count("POST /deploy"); n != 0 {
		t.Fatalf("deploy ran %d times while its execution could not be audited", n)
	}
	go svc.RunSchedule(ctx, 20*time.Millisecond)
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := svc.State(ctx, "th")
		if err != nil {
			t.Fatal(err)
		}
		if res.Status() == graph.Done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run is %s (%s), deploy ran %d times; want it retried on its own and done", res.Status(), res.Checkpoint.Error, tg.Count("POST /deploy"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := tg.Count("POST /deploy"); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
	finished, asked := false, 0
	for _, k := range rep.kinds() {
		switch k {
		case "run_failed":
			t.Errorf("events %v: people were shown a failed run", rep.kinds())
		case "approval_needed deploy":
			asked++
		case "call_finished deploy":
			finished = true
		}
	}
	if asked != 1 {
		t.Errorf("events %v: people were asked about the deploy %d times, want once (never for an unknown outcome)", rep.kinds(), asked)
	}
	if !finished {
		t.Errorf("events %v: the deploy's result was never shown", rep.kinds())
	}
	// The answer is shown once the save that holds it is durable: just
	// after the state reads done.
	for len(rep.answers()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no answer shown after the deploy ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
