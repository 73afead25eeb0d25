package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/audit"
	"github.com/countersign/countersign/llm/llmtest"
)

// auditFlow runs an approval through the bot — a refused click, the
// approval, the call and its answer — and waits until the call's outcome
// is in the trail. It returns a client of the bot's Redis and the trail.
func auditFlow(t *testing.T, h *harness) (*redis.Client, []redis.XMessage) {
	t.Helper()
	root, card := h.deployFlow("Deployed.")
	h.click(card, "approve", requester) // may not approve their own request
	h.ephemeral(requester, "You can't decide this call")
	h.click(card, "approve", approver)
	h.reply(root, "Deployed.")
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	var entries []redis.XMessage
	h.eventually(func() bool {
		entries, _ = rdb.XRange(context.Background(), "cs:audit", "-", "+").Result()
		return len(entries) > 0 && unpacked(entries[len(entries)-1])["event"] == "outcome"
	}, "the call's outcome in the audit trail")
	var events []string
	for _, e := range entries {
		events = append(events, fmt.Sprint(unpacked(e)["event"]))
	}
	if got := strings.Join(events, " "); got != "refusal decision execution outcome" {
		t.Fatalf("audit trail events = %s; want the refusal, the approval, the execution and its outcome", got)
	}
	return rdb, entries
}

func idTime(id string) time.Time { return audit.Entry{ID: id}.Time() }

// auditTrail reads the audit stream in Redis, each entry's fields
// unpacked as the bot reads them (audit.Unpack).
func auditTrail(rdb *redis.Client) ([]redis.XMessage, error) {
	msgs, err := rdb.XRange(context.Background(), "cs:audit", "-", "+").Result()
	for i, m := range msgs {
		msgs[i].Values = unpacked(m)
	}
	return msgs, err
}

// unpacked is a stream entry of the audit trail with its fields unpacked
// (audit.Unpack): those of an entry the bot packed, those of one kept a
// stream field each as they are.
func unpacked(m redis.XMessage) map[string]any {
	stored := make(map[string]string, len(m.Values))
	for k, v := range m.Values {
		stored[k] = fmt.Sprint(v)
	}
	fields, _ := audit.Unpack(stored)
	out := make(map[string]any, len(fields))
	for k, v := range fields {
		out[k] = v
	}
	return out
}

// repacked is a packed entry's values with field name's value in the
// packed fields changed to value, as someone with write access to Redis
// would edit it: the lengths kept right.
func repacked(t *testing.T, m redis.XMessage, name, value string) map[string]any {
	t.Helper()
	fields := unpacked(m)
	old, ok := fields[name].(string)
	packed, _ := m.Values[audit.FieldPacked].(string)
	line := func(v string) string { return fmt.Sprintf("%d:%s%d:%s\n", len(name), name, len(v), v) }
	if !ok || !strings.Contains(packed, line(old)) {
		t.Fatalf("entry %s has no packed field %s: %v", m.ID, name, m.Values)
	}
	out := maps.Clone(m.Values)
	out[audit.FieldPacked] = strings.Replace(packed, line(old), line(value), 1)
	return out
}

// verifyFails runs bot audit verify and returns its output, failing the
// test unless it exits 1.
func verifyFails(t *testing.T, h *harness, args ...string) string {
	t.Helper()
	out, err := h.run("", append([]string{"audit", "verify"}, args...)...)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("bot audit verify %v = %v\n%s\nwant exit status 1", args, err, out)
	}
	return out
}

// rewrite replaces the audit stream with entries, keeping their IDs, as
// someone with write access to Redis would edit it.
func rewrite(t *testing.T, rdb *redis.Client, entries []redis.XMessage) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.Del(ctx, "cs:audit").Err(); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "cs:audit", ID: e.ID, Values: e.Values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func copyValues(m redis.XMessage) redis.XMessage {
	v := make(map[string]any, len(m.Values))
	for k, x := range m.Values {
		v[k] = x
	}
	return redis.XMessage{ID: m.ID, Values: v}
}

// The trail of a real approval verifies; an entry edited in Redis, one
// deleted from the middle, two swapped and the newest deleted are each
// found by bot audit verify, which names the entry and exits 1.
func TestAuditVerify(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "tools:\n  http_request:\n    self_approval: false\n")
	rdb, entries := auditFlow(t, h)
	head, _ := rdb.HGetAll(context.Background(), "{cs:audit}:head").Result()

	out := h.cli(t, "", "audit", "verify")
	if !strings.Contains(out, "OK: 4 entries verified (seq 1 to 4)") || !strings.Contains(out, head["hash"]) {
		t.Fatalf("bot audit verify:\n%s\nwant OK for 4 entries and the head's hash %s", out, head["hash"])
	}

	tests := []struct {
		name   string
		tamper func([]redis.XMessage) []redis.XMessage
		want   []string
	}{
		{"approver changed", func(es []redis.XMessage) []redis.XMessage {
			es[1].Values = repacked(t, es[1], "by", "U0MALLORY")
			return es
		}, []string{"BROKEN: entry " + entries[1].ID + " (seq 2): changed", "1 entry verified before the break"}},
		{"refusal deleted", func(es []redis.XMessage) []redis.XMessage {
			return append(es[:0:0], es[1:]...)
		}, []string{"entry " + entries[1].ID + " (seq 2): missing: entry 1 is missing before the oldest kept entry"}},
		{"execution deleted", func(es []redis.XMessage) []redis.XMessage {
			return append(es[:2:2], es[3])
		}, []string{"entry " + entries[3].ID + " (seq 4): missing: entry 3 is missing before it"}},
		{"outcome and execution swapped", func(es []redis.XMessage) []redis.XMessage {
			es[2].Values, es[3].Values = es[3].Values, es[2].Values
			return es
		}, []string{"entry " + entries[2].ID + " (seq 4): reordered"}},
		{"outcome deleted", func(es []redis.XMessage) []redis.XMessage {
			return es[:3]
		}, []string{"entry " + entries[2].ID + " (seq 3): missing: entry 4 is missing after it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tampered := make([]redis.XMessage, len(entries))
			for i, e := range entries {
				tampered[i] = copyValues(e)
			}
			rewrite(t, rdb, tt.tamper(tampered))
			out := verifyFails(t, h)
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Errorf("bot audit verify after %s:\n%s\nwant %q", tt.name, out, want)
				}
			}
			rewrite(t, rdb, entries)
			if out, err := h.run("", "audit", "verify"); err != nil {
				t.Fatalf("bot audit verify of the restored trail: %v\n%s", err, out)
			}
		})
	}
}

// bot audit export writes every entry, oldest first, in JSON lines or
// CSV that read back to the entries in Redis and verify again offline;
// --since and --after narrow it; a tampered export fails to verify.
func TestAuditExport(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "tools:\n  http_request:\n    self_approval: false\n")
	_, stored := auditFlow(t, h)
	dir := t.TempDir()
	for _, f := range []audit.Format{audit.JSONL, audit.CSV} {
		t.Run(string(f), func(t *testing.T) {
			out := h.cli(t, "", "audit", "export", "--format", string(f), "--since", "1h")
			r := audit.NewReader(strings.NewReader(out), f)
			var got []audit.Entry
			for {
				e, err := r.Read()
				if err != nil {
					if err.Error() != "EOF" {
						t.Fatalf("reading the export: %v\n%s", err, out)
					}
					break
				}
				got = append(got, e)
			}
			if len(got) != len(stored) {
				t.Fatalf("export has %d entries, Redis %d:\n%s", len(got), len(stored), out)
			}
			for i, e := range got {
				if want := unpacked(stored[i]); e.ID != stored[i].ID || e.Fields["hash"] != want["hash"] || e.Fields["event"] != want["event"] {
					t.Errorf("export entry %d = %v, want %v", i, e, stored[i])
				}
			}
			if f == audit.JSONL && !strings.HasPrefix(out, `{"id":"`+stored[0].ID+`","time":"`) {
				t.Errorf("a JSON line starts %.40q; want id and time first", out)
			}

			path := filepath.Join(dir, "trail."+string(f))
			if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
				t.Fatal(err)
			}
			if v := h.cli(t, "", "audit", "verify", "--file", path); !strings.Contains(v, "OK: 4 entries verified") {
				t.Errorf("bot audit verify --file %s:\n%s", path, v)
			}
			tampered := strings.Replace(out, approver, "U0MALLORY", 1)
			if err := os.WriteFile(path, []byte(tampered), 0o600); err != nil {
				t.Fatal(err)
			}
			if v := verifyFails(t, h, "--file", path); !strings.Contains(v, "changed") {
				t.Errorf("bot audit verify --file of a tampered export:\n%s\nwant a changed entry", v)
			}
		})
	}
	if out := h.cli(t, "", "audit", "export", "--after", stored[2].ID); strings.Count(out, "\n") != 1 || !strings.Contains(out, stored[3].ID) {
		t.Errorf("export --after the third entry:\n%s\nwant the fourth only", out)
	}
	if out := h.cli(t, "", "audit", "export", "--since", "2999-01-01T00:00:00Z", "--format", "csv"); strings.Count(out, "\n") != 1 {
		t.Errorf("export --since the future:\n%s\nwant the CSV header only", out)
	}
	if out, err := h.run("", "audit", "export", "--format", "xml"); err == nil || !strings.Contains(out, "jsonl or csv") {
		t.Errorf("export --format xml = %v\n%s; want a clear error", err, out)
	}
	// The listing still works, and shows the arguments' hash.
	if out := h.cli(t, "", "audit", "--wide"); !strings.Contains(out, `event="outcome"`) || !strings.Contains(out, "args_hash=") {
		t.Errorf("bot audit:\n%s\nwant the entries with their arguments' hash", out)
	}
}

// With AUDIT_RETENTION set, entries older than it go as new ones are
// written, and the trail still verifies, anchored at the oldest kept
// entry; a malformed AUDIT_RETENTION stops the bot at start-up.
func TestAuditRetention(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "tools:\n  http_request:\n    self_approval: false\n")
	rdb, first := auditFlow(t, h)
	h.restartWith("AUDIT_RETENTION=1s")
	h.model.Then(
		llmtest.Reply("Deploying.", call("c2", "POST", h.target.URL+"/deploy", "v3")),
		llmtest.Reply("Deployed again."),
	)
	h.command("deploy again", nil, nil)
	root := h.root(2)
	card := h.cards(root, 1)[0]
	// Refused clicks write entries until the first flow's have gone.
	trimmed := func() bool {
		oldest, err := rdb.XRangeN(context.Background(), "cs:audit", "-", "+", 1).Result()
		return err == nil && len(oldest) == 1 && idTime(oldest[0].ID).After(idTime(first[len(first)-1].ID))
	}
	h.eventually(func() bool {
		if trimmed() {
			return true
		}
		h.click(card, "approve", requester)
		return false
	}, "the first flow's entries trimmed by retention")
	h.click(card, "approve", approver)
	h.reply(root, "Deployed again.")
	out := h.cli(t, "", "audit", "verify")
	if !strings.Contains(out, "OK: ") || !strings.Contains(out, "trimmed by retention") {
		t.Errorf("bot audit verify after retention:\n%s\nwant OK, anchored after the trimmed entries", out)
	}

	if out, code := runBot(t, []string{"AUDIT_RETENTION=forever", "REDIS_URL=redis://" + h.redis.Addr() + "/0"}, "", "chat"); code == 0 || !strings.Contains(out, "AUDIT_RETENTION") {
		t.Errorf("bot chat with AUDIT_RETENTION=forever exited %d:\n%s\nwant a clear error", code, out)
	}
}

// exportEntries runs bot audit export and reads the entries back.
func exportEntries(t *testing.T, h *harness) []audit.Entry {
	t.Helper()
	r := audit.NewReader(strings.NewReader(h.cli(t, "", "audit", "export")), audit.JSONL)
	var out []audit.Entry
	for e, err := r.Read(); err == nil; e, err = r.Read() {
		out = append(out, e)
	}
	return out
}

// resealFrom rewrites entries from index i on as someone with write
// access to Redis would: each sealed again after the one before it.
func resealFrom(t *testing.T, entries []audit.Entry, i int) {
	t.Helper()
	var head audit.Head
	if i > 0 {
		seq, _ := entries[i-1].Seq()
		head = audit.Head{Seq: seq, Hash: entries[i-1].Fields["hash"]}
	}
	for j := i; j < len(entries); j++ {
		fields := map[string]string{}
		for k, v := range entries[j].Fields {
			if k != "seq" && k != "prev" && k != "hash" {
				fields[k] = v
			}
		}
		sealed, next, err := audit.Seal(fields, head)
		if err != nil {
			t.Fatal(err)
		}
		entries[j].Fields, head = sealed, next
	}
}

// bot audit head prints the chain's head; verify --head passes on the
// trail, and on its export, that hold it. An export rewritten from some
// entry on with its hashes recomputed passes plain verify --file but not
// --head with the head noted before; so does the trail in Redis,
// rewritten and its head moved. A head the trail does not hold fails.
func TestAuditVerifyAgainstAHeadNotedElsewhere(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "tools:\n  http_request:\n    self_approval: false\n")
	rdb, stored := auditFlow(t, h)
	ctx := context.Background()
	redisHead, _ := rdb.HGetAll(ctx, "{cs:audit}:head").Result()
	noted := strings.TrimSpace(h.cli(t, "", "audit", "head"))
	if want := redisHead["seq"] + ":" + redisHead["hash"]; noted != want {
		t.Fatalf("bot audit head = %q, want %q", noted, want)
	}
	if out := h.cli(t, "", "audit", "verify", "--head", noted); !strings.Contains(out, "OK: 4 entries verified") || !strings.Contains(out, "The chain holds the head "+noted) {
		t.Errorf("bot audit verify --head %s:\n%s", noted, out)
	}
	entries := exportEntries(t, h)
	dir := t.TempDir()
	write := func(name string, entries []audit.Entry) string {
		var b strings.Builder
		w := audit.NewWriter(&b, audit.JSONL)
		for _, e := range entries {
			if err := w.Write(e); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	export := write("trail.jsonl", entries)
	if out := h.cli(t, "", "audit", "verify", "--file", export, "--head", noted); !strings.Contains(out, "The chain holds the head") {
		t.Errorf("bot audit verify --file --head of the export:\n%s", out)
	}

	// The refusal's reason changed, every hash from there recomputed.
	if entries[0].Fields["event"] != "refusal" {
		t.Fatalf("first entry %v; want the refusal", entries[0].Fields)
	}
	entries[0].Fields["reason"] = "approved by the requester's manager"
	resealFrom(t, entries, 0)
	rewritten := write("rewritten.jsonl", entries)
	if out := h.cli(t, "", "audit", "verify", "--file", rewritten); !strings.Contains(out, "OK: 4 entries verified") {
		t.Fatalf("plain verify --file of the rewritten export:\n%s\nwant it to pass: only an anchor shows the rewrite", out)
	}
	out := verifyFails(t, h, "--file", rewritten, "--head", noted)
	if want := "the trail does not hold the anchor " + noted + ": its entry 4 (" + stored[3].ID + ") has the hash " + entries[3].Fields["hash"]; !strings.Contains(out, want) {
		t.Errorf("verify --file --head of the rewritten export:\n%s\nwant %q", out, want)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "BROKEN: ") {
		t.Errorf("verify --file --head of the rewritten export printed:\n%s\nwant the one BROKEN line, said once", out)
	}

	// The same rewrite in Redis, with the head moved to match: plain
	// verify passes, verify --head of the noted head does not.
	var msgs []redis.XMessage
	for _, e := range entries {
		values := map[string]any{}
		for k, v := range e.Fields {
			values[k] = v
		}
		msgs = append(msgs, redis.XMessage{ID: e.ID, Values: values})
	}
	rewrite(t, rdb, msgs)
	if err := rdb.HSet(ctx, "{cs:audit}:head", "hash", entries[3].Fields["hash"], "seq", "4").Err(); err != nil {
		t.Fatal(err)
	}
	if out := h.cli(t, "", "audit", "verify"); !strings.Contains(out, "OK: 4 entries verified") {
		t.Fatalf("plain verify of the rewritten trail:\n%s", out)
	}
	if out := verifyFails(t, h, "--head", noted); !strings.Contains(out, "does not hold the anchor "+noted) {
		t.Errorf("verify --head of the rewritten trail:\n%s", out)
	}
	rewrite(t, rdb, stored)
	if err := rdb.HSet(ctx, "{cs:audit}:head", "hash", redisHead["hash"], "seq", redisHead["seq"]).Err(); err != nil {
		t.Fatal(err)
	}

	// Heads the trail does not hold, and heads that are not heads.
	wrong := "4:" + strings.Repeat("0", 64)
	for _, tt := range []struct{ head, want string }{
		{wrong, "its entry 4 (" + stored[3].ID + ") has the hash " + redisHead["hash"]},
		{"9:" + redisHead["hash"], "the trail ends at entry 4, before it"},
	} {
		if out := verifyFails(t, h, "--head", tt.head); !strings.Contains(out, tt.want) {
			t.Errorf("verify --head %s:\n%s\nwant %q", tt.head, out, tt.want)
		}
		if out := verifyFails(t, h, "--file", export, "--head", tt.head); !strings.Contains(out, tt.want) {
			t.Errorf("verify --file --head %s:\n%s\nwant %q", tt.head, out, tt.want)
		}
	}
	for _, bad := range []string{"4", redisHead["hash"], "4:" + redisHead["hash"][:12]} {
		if out, err := h.run("", "audit", "verify", "--head", bad); err == nil || !strings.Contains(out, "SEQ:HASH") {
			t.Errorf("verify --head %q = %v\n%s; want a usage error", bad, err, out)
		}
	}
}
