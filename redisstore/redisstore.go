// Package redisstore keeps Countersign's durable state in Redis: checkpoints
// and their history (it implements graph.Store), decision claims, run
// leases, the wake-up schedule, delivery dedup keys, card references and
// the audit stream. It works with a single Redis server and with Redis
// Cluster, and needs Redis 7 or later (or miniredis, the embedded
// in-process Redis). It does not decide what to store or when; graph and
// runner do.
//
// # Key layout
//
// Every key of a thread carries the whole thread name as its Redis Cluster
// hash tag, so all of them live in one slot and one Lua script can read and
// write them together:
//
//	cs:{<thread>}:journal  list    journal entries (JSON), append-only: entry i is item i
//	cs:{<thread>}:history  list    checkpoint JSON without the journal (compressed, see
//	                               compress.go), newest first,
//	                               capped at Options.HistoryLimit; item 0 is the latest
//	cs:{<thread>}:claims   hash    claim key → value, each set once (decisions); and the
//	                               approvals of calls that need several, one line appended
//	                               per approver (approvals.go); and the head: "@seq",
//	                               "@len", "@id", the latest checkpoint's counters and ID
//	                               (head.go)
//	cs:{<thread>}:head     hash    seq, journal_len, id: where the head was kept before it
//	                               moved into the claims hash; read, and dropped by the
//	                               next save
//	cs:{<thread>}:lease    string  the token of the run lease's acquisition (owner:random)
//	cs:{<thread>}:fence    string  the number of the lease's latest acquisition (lease.go)
//	cs:{<thread>}:kept     list    replies typed before the thread's first save, which
//	                               that save hands to the start (firstsave.go); expires
//	cs:{<thread>}:sync     string  written beside a write to the thread, or a read of its
//	                               claims, while a write there has not been acknowledged by
//	                               Options.Replicas, so that a WAIT covers it (replicas.go);
//	                               expires (the same for any other slot's hash tag)
//
// The head holds only what the compare-and-set checks, so a save neither
// decodes nor stores the latest checkpoint twice. It lives in the claims
// hash, which a thread has anyway once it has shown anything: a key of
// its own cost a paused thread more than its three fields (head.go).
//
// Beside the threads, a few records are keys of their own (records.go):
//
//	cs:dedup:<key>  string  a delivery seen (a Slack retry, an event id); expires
//	cs:ref:<ref>    string  what a button's opaque value stands for, compressed (refs.go);
//	                        expires. Approval cards keep their token in the thread's
//	                        claims instead (handlers: cardref.go); those of error cards,
//	                        of cards redrawn with approvals, and of approval cards
//	                        posted before that are references
//	cs:wakeups      zset    thread → when to look at it again (unix ms)
//	{cs:wakeups}:by:<thread>
//	                string  the number of the lease acquisition that last set the
//	                        thread's wake-up (records.go). Its hash tag is the
//	                        schedule's name, which puts both in one Cluster slot
//	cs:waiting      hash    thread → how many of its calls waited for a person: written
//	                        by earlier versions, and forgotten thread by thread as they
//	                        close; the inbox holds the waiting calls (waiting.go)
//	cs:audit        stream  the audit trail: one entry per decision, refusal, execution
//	                        and outcome, chained by hashes (package audit); entries
//	                        older than Options.AuditRetention are trimmed as entries
//	                        are appended (audit.go). An entry holds seq, hash and
//	                        fields, its other fields packed (audit.SealPacked); one
//	                        an earlier version wrote, a stream field each, reads alike
//	{cs:audit}:head hash    hash, seq: the audit chain's newest link; trimmed: the seq of
//	                        the newest entry retention removed. Its hash tag is the
//	                        stream's name, which puts both in one Cluster slot
//	cs:mailbox:<b>  list    an answer on its way to the process waiting for it (mailbox.go); expires
//	cs:{inbox}:…            the calls that wait for people, their recent decisions and who
//	                        opened the Home tab (inbox.go)
//	cs:{members}:…          which user groups and channels changed members, and the
//	                        change events seen (members.go)
//
// "cs" is Options.Prefix. In the prefix and the thread name, "%", "{" and "}"
// are written as "%25", "%7B" and "%7D", so the hash tag is always exactly
// the thread and two names never share keys.
//
// # Round trips
//
// Save is one EVALSHA of a Lua script that checks the head's seq and the
// journal's length (compare-and-set), appends only the new journal entries,
// updates the head, pushes the checkpoint onto the history and trims it,
// and refreshes the expiry of the thread's keys; a conflict writes nothing.
// What a save sends is the checkpoint without its journal plus the new
// entries, whatever the conversation's length. Load, LoadTail, Journal,
// History, Claim, Claims and the lease calls are one round trip each.
// LoadTail reads only what a reader that saw a given checkpoint has not
// seen: nothing more than a few bytes when that is still the head.
//
// The runner begins and ends each holding of a thread in one round trip
// (sessions.go): OpenThread takes the lease, moves the wake-up and reads
// the head's ID and the claims asked for; CloseThread records deliveries,
// sets the wake-up, releases the lease and reads
// back the claims asked for, and appends audit entries; ClaimDecision
// writes the wake-up, the claim, the audit entry and, if asked, takes the
// lease. On a single server each is one script; on Redis Cluster the keys
// outside the thread's slot (wake-ups, audit) are written by
// commands of their own. An audit entry is appended in the same script
// only if the chain's head is the one this process last saw; else it is
// appended by a script of its own right after (audit.go).
// A CloseThread that carries an inbox update sends it with the close, as
// a second script in the same round trip (inbox.go).
//
// A run's last save — the checkpoint that pauses, finishes or fails it —
// ends the session in its own script when the runner asks
// (runner.LastSave): the save's checks and writes, the inbox update and
// CloseThread's work but the deliveries, which are shown after the
// checkpoint is durable and recorded after the lease is gone: by
// OpenThread or ClaimDecision, with the thread's next step, or by
// RecordDeliveries. On Redis Cluster that last save is a save alone, and
// the session ends with CloseThread.
//
// A conversation's first save takes the thread's lease itself
// (runner.FirstSave, firstsave.go): the runner's start opens nothing
// before it, and a first save that pauses or answers takes the lease and
// lets go of it in one script.
//
// # Expiry
//
// A save makes the journal, history and claims (with the head) expire Options.TTL
// from now, or at the checkpoint's KeepUntil plus an hour when that is
// later, so a paused thread outlives its approvals' deadlines. It never
// shortens an expiry, and leaves alone one that is within a minute of the
// new one: the saves of a running thread, seconds apart, then write no
// expiry at all. The lease keeps its own, short expiry.
//
// Run Redis with maxmemory-policy noeviction (its default): every key here
// has an expiry, so a volatile-* policy could evict one key of a thread and
// leave the others inconsistent.
package redisstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/audit"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/runner"
)

// ErrEmptyThread: a call named no thread.
var ErrEmptyThread = errors.New("empty thread name")

// keepMargin is how long a thread is kept past its checkpoint's KeepUntil,
// so that whatever acts on an expired approval still finds the thread.
const keepMargin = time.Hour

// refreshSlack is how far a thread's expiry may have run down before a save
// sets it again (a tenth of the expiry when that is less). It spares the
// saves of a running thread, seconds apart, a write per key.
const refreshSlack = time.Minute

// Options configures a Store. The zero value is usable.
type Options struct {
	// Prefix starts every key. Default "cs".
	Prefix string
	// HistoryLimit is how many checkpoints per thread the history keeps.
	// Default 50.
	HistoryLimit int
	// TTL is how long a thread is kept after its last save, give or take
	// a minute (see Expiry in the package doc). Default 30 days.
	TTL time.Duration
	// Now is the clock used to turn KeepUntil into an expiry. Default
	// time.Now.
	Now func() time.Time
	// Replicas, if above 0, is how many replicas must acknowledge each
	// save and each claim (Redis WAIT, on the connection that wrote it)
	// before it returns; a write they do not acknowledge within
	// ReplicaTimeout (default 2s) fails with ErrNotReplicated. Saves and
	// claims gate side effects — a claimed decision, a call saved as
	// running — so a failover of the thread's master cannot forget them.
	// A save the master made and they did not acknowledge is also
	// graph.ErrUnconfirmed (the run's next save follows it). Inbox
	// updates on a cluster, and AuditHead and ConfirmAudit, wait for them
	// too.
	Replicas int
	// ReplicaTimeout bounds the wait for replicas.
	ReplicaTimeout time.Duration
	// ReplicasConnected makes Replicas a most: a write whose master has
	// fewer replicas connected than Replicas when the wait falls short
	// needs only as many acknowledgements as it has, none when it has
	// none. A failover that promoted a master's only replica leaves the
	// slot's new master without one until another joins; without this,
	// every save and claim in that slot fails meanwhile. What it gives
	// up: a write made while a replica is cut off from its master (not
	// connected) is not waited for, and a failover to that replica loses
	// it.
	ReplicasConnected bool
	// AuditRetention is how long audit entries are kept: older ones are
	// trimmed as entries are appended. Default DefaultAuditRetention
	// (90 days).
	AuditRetention time.Duration
}

// ErrNotReplicated: a write was made but fewer replicas than
// Options.Replicas acknowledged it in time. What depends on it must not
// happen yet.
var ErrNotReplicated = errors.New("not acknowledged by enough replicas")

// Store keeps threads in Redis. It is safe for concurrent use by many
// goroutines and processes.
type Store struct {
	rdb          redis.UniversalClient
	prefix       string
	historyLimit int
	ttl          time.Duration
	now          func() time.Time
	replicas     int
	replicaWait  time.Duration
	// replicasConnected: Options.ReplicasConnected (replicas.go).
	replicasConnected bool
	// unsynced: the slots with a write no replica is known to have
	// (replicas.go).
	unsynced unsynced

	// The keys outside threads that the session, audit and inbox
	// scripts name, made once: wakeups, waiting, the audit stream and
	// its head, the inbox's calls and Home watchers.
	wakeups, waiting, auditStream, auditHead string
	inboxCalls, inboxHome                    string

	// The audit chain (audit.go): auditMu orders this process's
	// appends of their own; chain is the head it last saw.
	auditRetention time.Duration
	auditMu        sync.Mutex
	chainMu        sync.Mutex
	chain          audit.Head

	// home is who opened the Home tab, as the inbox's updates read it
	// (inbox.go).
	home homeWatchers

	// ranEach holds the SHA-1 of each script runEach has sent
	// (deliveries.go).
	ranEach sync.Map

	saveScript, journalScript     *redis.Script
	saveAuditScript               *redis.Script
	loadTailScript                *redis.Script
	claimScript                   *redis.Script
	acceptScript, dueIntakeScript *redis.Script
	renewScript, releaseScript    *redis.Script
	acquireScript, scheduleScript *redis.Script
	openScript, closeScript       *redis.Script
	claimDecisionScript           *redis.Script
	auditScript                   *redis.Script
	inboxScript                   *redis.Script
	recordScript, saveCloseScript *redis.Script
	moveWakeScript                *redis.Script
	// firstsave.go
	keepReplyScript, firstSaveScript, firstSaveCloseScript *redis.Script
	// claimsave.go
	claimSaveScript *redis.Script
}

// New returns a Store that keeps its data in rdb, a client of a single
// server or of a cluster.
func New(rdb redis.UniversalClient, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = "cs"
	}
	if opts.HistoryLimit <= 0 {
		opts.HistoryLimit = 50
	}
	if opts.TTL <= 0 {
		opts.TTL = 30 * 24 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	prefix := escape(opts.Prefix)
	return &Store{
		rdb:             rdb,
		prefix:          prefix,
		wakeups:         prefix + ":wakeups",
		waiting:         prefix + ":waiting",
		auditStream:     prefix + ":audit",
		auditHead:       "{" + prefix + ":audit}:head",
		inboxCalls:      prefix + ":{inbox}:calls",
		inboxHome:       prefix + ":{inbox}:home",
		historyLimit:    opts.HistoryLimit,
		ttl:             opts.TTL,
		now:             opts.Now,
		replicas:        opts.Replicas,
		replicaWait:     cmp.Or(opts.ReplicaTimeout, 2*time.Second),
		auditRetention:  cmp.Or(opts.AuditRetention, DefaultAuditRetention),
		saveScript:      redis.NewScript(saveLua),
		saveAuditScript: redis.NewScript(saveAuditLua),
		loadTailScript:  redis.NewScript(loadTailLua),
		journalScript:   redis.NewScript(journalLua),
		claimScript:     redis.NewScript(claimLua),
		acceptScript:    redis.NewScript(acceptLua),
		dueIntakeScript: redis.NewScript(dueIntakeLua),
		renewScript:     redis.NewScript(renewLeaseLua),
		releaseScript:   redis.NewScript(releaseLeaseLua),
		acquireScript:   redis.NewScript(acquireLua),
		scheduleScript:  redis.NewScript(scheduleLua),

		openScript:          redis.NewScript(openLua),
		closeScript:         redis.NewScript(closeLua),
		claimDecisionScript: redis.NewScript(claimDecisionLua),
		auditScript:         redis.NewScript(auditLua),
		inboxScript:         redis.NewScript(updateInboxLua),
		recordScript:        redis.NewScript(recordLua),
		saveCloseScript:     redis.NewScript(saveCloseLua),
		moveWakeScript:      redis.NewScript(moveWakeLua),
		claimSaveScript:     redis.NewScript(claimSaveLua),

		keepReplyScript:      redis.NewScript(keepReplyLua),
		firstSaveScript:      redis.NewScript(firstSaveLua),
		firstSaveCloseScript: redis.NewScript(firstSaveCloseLua),

		replicasConnected: opts.ReplicasConnected,
	}
}

// Load returns the thread's latest checkpoint with its whole journal, or
// graph.ErrNoCheckpoint.
//
// It reads the newest history entry and the journal in one MULTI/EXEC,
// not a script: one round trip that sees both at one instant, as a save
// writes them together (the journal then has exactly the entries the
// checkpoint covers). A long journal costs Redis several times as much
// when its reply passes through Lua: the script's call converts it into
// a Lua table, and its return converts that back.
func (s *Store) Load(ctx context.Context, thread string) (*graph.Checkpoint, error) {
	k, err := s.keys(thread)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	var meta *redis.StringCmd
	var journal *redis.StringSliceCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.LIndex(ctx, k.history, 0)
		journal = p.LRange(ctx, k.journal, 0, -1)
		return nil
	})
	if errors.Is(meta.Err(), redis.Nil) {
		return nil, fmt.Errorf("load checkpoint %s: %w", thread, graph.ErrNoCheckpoint)
	}
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", thread, err)
	}
	cp, err := decodeCheckpoint(meta.Val())
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", thread, err)
	}
	entries := journal.Val()
	if len(entries) < cp.JournalLen {
		return nil, fmt.Errorf("load checkpoint %s: journal has %d entries, checkpoint %s says %d", thread, len(entries), cp.ID, cp.JournalLen)
	}
	cp.Journal = journalOf(entries[:cp.JournalLen])
	return cp, nil
}

// journalOf copies a journal's entries, read as strings, into one
// buffer, each entry a slice of it: a 100-turn thread's 400 entries are
// one allocation, not 400.
func journalOf(entries []string) []json.RawMessage {
	n := 0
	for _, e := range entries {
		n += len(e)
	}
	buf := make([]byte, 0, n)
	out := make([]json.RawMessage, len(entries))
	for i, e := range entries {
		start := len(buf)
		buf = append(buf, e...)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out
}

// decodeLoad reads the load script's reply: {checkpoint JSON, {entries
// from "from" on}}.
func decodeLoad(res []any, from int) (*graph.Checkpoint, error) {
	if len(res) != 2 {
		return nil, fmt.Errorf("unexpected reply of %d items", len(res))
	}
	meta, ok := res[0].(string)
	if !ok {
		return nil, errors.New("thread has a head but no history")
	}
	entries, _ := res[1].([]any)
	cp, err := decodeCheckpoint(meta)
	if err != nil {
		return nil, err
	}
	if from+len(entries) != cp.JournalLen {
		return nil, fmt.Errorf("journal has %d entries, checkpoint %s says %d", from+len(entries), cp.ID, cp.JournalLen)
	}
	cp.JournalFrom = from
	cp.Journal, err = rawMessages(entries)
	if err != nil {
		return nil, err
	}
	return cp, nil
}

// LoadTail implements graph.TailLoader: it reads only what a reader that
// saw checkpoint id (seq, a journal of from entries) has not seen, in one
// round trip; nil and no error if that checkpoint is still the latest.
func (s *Store) LoadTail(ctx context.Context, thread, id string, seq int64, from int) (*graph.Checkpoint, error) {
	k, err := s.keys(thread)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	res, err := s.eval(ctx, s.loadTailScript, loadTailLua, []string{k.head, k.journal, k.history, k.claims}, []any{id, seq, from}).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("load checkpoint %s: %w", thread, graph.ErrNoCheckpoint)
	}
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", thread, err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	if len(res) != 3 {
		return nil, fmt.Errorf("load checkpoint %s: unexpected reply of %d items", thread, len(res))
	}
	at, _ := res[2].(int64)
	cp, err := decodeLoad(res[:2], int(at))
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s: %w", thread, err)
	}
	return cp, nil
}

// ErrFenced: a save carried a fence (graph.WithFence) that the thread's
// lease no longer holds — the run's acquisition of the lease lapsed,
// whoever (this process included) took it since. Nothing was written.
// It matches graph.ErrConflict too.
var ErrFenced = fmt.Errorf("%w: the thread's lease is no longer this run's", graph.ErrConflict)

// Save makes cp the thread's latest checkpoint, appends its journal entries
// and adds it to the history, in one round trip. It returns
// graph.ErrConflict, having written nothing, unless the stored head has
// Seq cp.Seq-1 and the stored journal has cp.JournalFrom entries; and
// ErrFenced if ctx carries a fence that the thread's lease does not hold.
//
// go-redis sends a script again when its answer is lost (a cut
// connection, a read timeout). Every save's script tells its own first
// attempt by the head: it is cp.ID, which no other save writes (IDs are
// random). A resend that finds it writes nothing and answers as the first
// attempt did — saved, the lease it took or let go as it did, its audit
// entries appended once (audit_had) — rather than a conflict, which would
// stop the run with its call saved running, to be settled by a person.
func (s *Store) Save(ctx context.Context, cp *graph.Checkpoint) error {
	if err := checkSave(cp); err != nil {
		return err
	}
	k, err := s.keys(cp.Thread)
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	meta, err := cp.MarshalMeta() // json.Marshal's JSON, without the journal
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", cp.Thread, err)
	}
	ttl := s.expiry(cp.KeepUntil)
	args := make([]any, 0, 12+len(cp.Journal))
	refreshBelow := ttl - min(refreshSlack, ttl/10)
	// The large numbers and the strings go in as pointers into one
	// struct: each put in an interface on its own is copied to the heap
	// (numbers below 256 are not), and go-redis writes a *int64 or a
	// *string as it writes the value (so do the hooks that count what
	// is sent).
	now := s.now().UnixMilli()
	v := &saveValues{ttl: ttl.Milliseconds(), refreshAt: now + refreshBelow.Milliseconds(), expAt: now + ttl.Milliseconds(),
		fence: graph.Fence(ctx), id: cp.ID, parent: cp.Parent}
	args = append(args, cp.Seq, cp.JournalFrom, cp.JournalLen, compressMeta(meta), s.historyTrim(cp.Seq),
		&v.ttl, &v.refreshAt, &v.fence, &v.id, &v.parent, &v.expAt)
	keys := []string{k.head, k.journal, k.history, k.claims, k.lease}
	if f := runner.FirstSaveOf(ctx); f != nil && cp.Seq == 1 && cp.JournalFrom == 0 && f.Thread == cp.Thread && f.Token == graph.Fence(ctx) {
		// A start's first save, which takes the lease (firstsave.go).
		var l *runner.LastSave
		if ls := runner.LastSaveOf(ctx); ls != nil && runner.SaveAuditOf(ctx) == nil && !s.isCluster() && ls.Closing.Token == f.Token && ls.Closing.Thread == cp.Thread {
			l = ls
		}
		saved, err := s.firstSave(ctx, cp, k, args, f, l)
		return s.saved(cp, saved, err)
	}
	if sc := runner.SavedClaimOf(ctx); sc != nil {
		// The first save of a run resumed by a click, which claims
		// the decision with it (claimsave.go).
		saved, handled, err := s.saveClaiming(ctx, cp, k, args, sc, runner.SaveAuditOf(ctx))
		if handled {
			return s.saved(cp, saved, err)
		}
	}
	// Audit entries that go with the save (runner.SaveAudit) are
	// appended in the same script on a single server; on a cluster the
	// audit stream is in another slot, and the runner appends them on
	// their own.
	sa := runner.SaveAuditOf(ctx)
	var audit []any
	if sa != nil && len(sa.Records) > 0 && !s.isCluster() {
		if audit, err = s.auditBlock(sa.Records); err != nil {
			return fmt.Errorf("save checkpoint %s: %w", cp.Thread, err)
		}
		keys = append(keys, s.auditKey(), s.auditHeadKey())
		args = append(args, s.auditMinID(), len(audit))
		args = append(args, audit...)
	}
	var saved int
	if l := runner.LastSaveOf(ctx); l != nil && sa == nil && !s.isCluster() && l.Closing.Token != "" &&
		l.Closing.Token == graph.Fence(ctx) && l.Closing.Thread == cp.Thread {
		// The run's last save, which also ends the session. On a
		// cluster the session's other records are in other slots: the
		// runner ends it with CloseThread.
		saved, err = s.saveClosing(ctx, cp, k, args, l, nil)
		return s.saved(cp, saved, err)
	}
	for _, e := range cp.Journal {
		args = append(args, []byte(e))
	}
	if audit != nil {
		saved, err = s.saveAudited(ctx, keys, args, sa)
	} else {
		saved, err = s.save(ctx, keys, args)
		if saved == 1 && errors.Is(err, ErrNotReplicated) && graph.IsFollowUp(ctx) {
			saved, err = s.confirmFollowUp(ctx, keys, args, err)
		}
	}
	return s.saved(cp, saved, err)
}

// saveValues are the values of saveLua's arguments that Save passes as
// pointers.
type saveValues struct {
	ttl, refreshAt, expAt int64
	fence, id, parent     string
}

// historyTrim is saveLua's "trim the history to" argument for the save
// of checkpoint seq: the last index to keep (the limit less one) when
// the save trims the history, else "". Each save pushes one checkpoint,
// so a thread's history holds seq of them until trimmed: every step-th
// save past the limit trims it back, and the history runs at most a
// tenth over its cap (readers read the cap's worth). The script then
// needs no number of its own to decide (Redis converts a script's
// string to a number at a cost).
func (s *Store) historyTrim(seq int64) any {
	limit := int64(s.historyLimit)
	step := max(1, limit/10)
	if seq <= limit || (seq-limit)%step != 0 {
		return ""
	}
	return limit - 1
}

// save runs saveLua and returns its reply: with ErrNotReplicated too,
// since the script ran, what it answered says whether the master has
// the checkpoint (saved).
func (s *Store) save(ctx context.Context, keys []string, args []any) (int, error) {
	cmd := s.runScript(ctx, s.saveScript, saveLua, keys, args...)
	saved, err := cmd.Int()
	if errors.Is(err, ErrNotReplicated) {
		if v, ok := cmd.Val().(int64); ok {
			saved = int(v)
		}
	}
	return saved, err
}

// followUpFor is how long a follow-up save (graph.WithFollowUp) that the
// replicas did not acknowledge is sent again: the runner's default lease
// (runner.Options.LeaseTTL), during which nobody else takes the thread
// over — longer than a Cluster takes to promote a replica.
const followUpFor = 10 * time.Second

// confirmFollowUp sends a follow-up save that the master made and its
// replicas did not acknowledge (err) again, as it was, until they do,
// for up to followUpFor. On the master that has it, the save recognises
// itself and writes nothing but the slot's sync key, so its WAIT waits
// for it (replicas.go). On a master promoted without it — a replica that
// got the unconfirmed save before it, and not it, when the master died —
// it is made there, fenced by the run's lease as the first attempt was.
// So the new master does not keep a call marked running, never sent,
// for a recovery to show as "outcome unknown". A save the new master
// refuses (its head is not the one this save follows, or the lease is
// not the run's) is answered as refused.
func (s *Store) confirmFollowUp(ctx context.Context, keys []string, args []any, err error) (int, error) {
	saved := 1
	deadline := time.Now().Add(followUpFor)
	for backoff := 100 * time.Millisecond; time.Now().Add(backoff).Before(deadline); backoff = min(2*backoff, time.Second) {
		select {
		case <-ctx.Done():
			return saved, err
		case <-time.After(backoff):
		}
		n, e := s.save(ctx, keys, args)
		switch {
		case e == nil:
			return n, nil
		case errors.Is(e, ErrNotReplicated) && n != 1:
			return n, nil // nothing written: the save is refused
		case errors.Is(e, ErrNotReplicated):
			saved, err = n, e
		}
		// Any other error (an answer lost, a master that is going
		// away): the save is sent again, and recognises itself.
	}
	return saved, err
}

// saved turns a save script's reply into Save's error. A save the master
// made (saved is 1) that its replicas did not acknowledge is also
// graph.ErrUnconfirmed: the run follows it with its next save, which says
// what became of the work it was about to do (a call saved running and
// not sent: approved again), instead of leaving the master with a head
// that says more than happened.
func (s *Store) saved(cp *graph.Checkpoint, saved int, err error) error {
	if err != nil {
		if saved == 1 && errors.Is(err, ErrNotReplicated) {
			return fmt.Errorf("save checkpoint %s seq %d: %w: %w", cp.Thread, cp.Seq, err, graph.ErrUnconfirmed)
		}
		return fmt.Errorf("save checkpoint %s seq %d: %w", cp.Thread, cp.Seq, err)
	}
	if saved < 0 {
		return fmt.Errorf("save checkpoint %s seq %d: %w", cp.Thread, cp.Seq, ErrFenced)
	}
	if saved == 0 {
		return fmt.Errorf("save checkpoint %s seq %d with journal from %d: %w", cp.Thread, cp.Seq, cp.JournalFrom, graph.ErrConflict)
	}
	return nil
}

// saveAudited runs saveAuditLua and returns saveLua's reply; when the
// save appended sa's entries, it says so to sa.
func (s *Store) saveAudited(ctx context.Context, keys []string, args []any, sa *runner.SaveAudit) (int, error) {
	cmd := s.runScript(ctx, s.saveAuditScript, saveAuditLua, keys, args...)
	res, err := cmd.Slice()
	var unreplicated error
	if errors.Is(err, ErrNotReplicated) {
		// The script ran: its reply says what the master has.
		var ok bool
		if res, ok = cmd.Val().([]any); ok {
			unreplicated, err = err, nil
		}
	}
	if err != nil {
		return 0, err
	}
	if len(res) != 1 && len(res) != 4 {
		return 0, fmt.Errorf("unexpected reply %v", res)
	}
	saved, _ := res[0].(int64)
	// The checkpoint is saved whatever became of the entries: those not
	// appended (the chain's head had moved) are the runner's to append.
	if saved == 1 {
		if appended, err := s.learnAuditHead(auditReply(res, 1)); err == nil && appended {
			sa.Appended()
		}
	}
	return int(saved), unreplicated
}

// checkSave reports a checkpoint that cannot be saved because it contradicts
// itself.
func checkSave(cp *graph.Checkpoint) error {
	switch {
	case cp == nil:
		return errors.New("save checkpoint: nil checkpoint")
	case cp.Seq < 1:
		return fmt.Errorf("save checkpoint %s: seq %d is below 1", cp.Thread, cp.Seq)
	case cp.JournalFrom < 0 || len(cp.Journal) != cp.JournalLen-cp.JournalFrom:
		return fmt.Errorf("save checkpoint %s: journal carries %d entries, want [%d, %d)",
			cp.Thread, len(cp.Journal), cp.JournalFrom, cp.JournalLen)
	}
	return nil
}

// expiry returns how long a thread written now is kept.
func (s *Store) expiry(keepUntil time.Time) time.Duration {
	ttl := s.ttl
	if !keepUntil.IsZero() {
		ttl = max(ttl, keepUntil.Sub(s.now())+keepMargin)
	}
	return ttl
}

// History returns up to Options.HistoryLimit of the thread's checkpoints,
// newest first, without journals, or graph.ErrNoCheckpoint.
func (s *Store) History(ctx context.Context, thread string) ([]*graph.Checkpoint, error) {
	k, err := s.keys(thread)
	if err != nil {
		return nil, fmt.Errorf("checkpoint history: %w", err)
	}
	metas, err := s.rdb.LRange(ctx, k.history, 0, int64(s.historyLimit)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("checkpoint history %s: %w", thread, err)
	}
	if len(metas) == 0 {
		return nil, fmt.Errorf("checkpoint history %s: %w", thread, graph.ErrNoCheckpoint)
	}
	cps := make([]*graph.Checkpoint, len(metas))
	for i, meta := range metas {
		if cps[i], err = decodeCheckpoint(meta); err != nil {
			return nil, fmt.Errorf("checkpoint history %s: %w", thread, err)
		}
	}
	return cps, nil
}

// Journal returns the thread's first n journal entries (all of them if the
// journal is shorter), or graph.ErrNoCheckpoint.
func (s *Store) Journal(ctx context.Context, thread string, n int) ([]json.RawMessage, error) {
	k, err := s.keys(thread)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	res, err := s.journalScript.Run(ctx, s.rdb, []string{k.head, k.journal, k.claims}, n).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("journal %s: %w", thread, graph.ErrNoCheckpoint)
	}
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", thread, err)
	}
	entries, err := rawMessages(res)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", thread, err)
	}
	return entries, nil
}

// Delete removes every key of the thread: checkpoints, journal, history,
// claims and lease, and its calls in the inbox. Deleting a thread that
// does not exist is not an error.
func (s *Store) Delete(ctx context.Context, thread string) error {
	k, err := s.keys(thread)
	if err != nil {
		return fmt.Errorf("delete thread: %w", err)
	}
	// One DEL: the keys share a slot, so this works on a cluster too.
	if err := s.rdb.Del(ctx, k.head, k.journal, k.history, k.claims, k.lease, k.fence).Err(); err != nil {
		return fmt.Errorf("delete thread %s: %w", thread, err)
	}
	return s.forgetInbox(ctx, thread)
}

// Ping reports whether Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w", err)
	}
	return nil
}

// threadKeys are the keys of one thread.
type threadKeys struct {
	head, journal, history, claims, lease, fence string
}

// keySuffixes are the names of a thread's keys after its base, in the
// order of threadKeys' fields.
var keySuffixes = [...]string{"head", "journal", "history", "claims", "lease", "fence"}

// keys returns the thread's keys. They are built as one string, of which
// each key is a part: one allocation for the six, which every call on a
// thread makes.
func (s *Store) keys(thread string) (threadKeys, error) {
	if thread == "" {
		return threadKeys{}, ErrEmptyThread
	}
	name := escape(thread)
	base := len(s.prefix) + len(":{") + len(name) + len("}:")
	var b strings.Builder
	b.Grow(len(keySuffixes)*base + len("headjournalhistoryclaimsleasefence"))
	var ends [len(keySuffixes)]int
	for i, suffix := range keySuffixes {
		b.WriteString(s.prefix)
		b.WriteString(":{")
		b.WriteString(name)
		b.WriteString("}:")
		b.WriteString(suffix)
		ends[i] = b.Len()
	}
	all := b.String()
	key := func(i int) string { return all[ends[i]-base-len(keySuffixes[i]) : ends[i]] }
	return threadKeys{head: key(0), journal: key(1), history: key(2), claims: key(3), lease: key(4), fence: key(5)}, nil
}

// escape writes "%", "{" and "}" as "%25", "%7B" and "%7D", so that a name
// holds no hash tag delimiter and distinct names stay distinct.
func escape(name string) string {
	if !strings.ContainsAny(name, "%{}") {
		return name
	}
	var b strings.Builder
	for i := range len(name) { // bytes, not runes: names need not be UTF-8
		switch c := name[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func decodeCheckpoint(stored string) (*graph.Checkpoint, error) {
	meta, err := expandMeta([]byte(stored))
	if err != nil {
		return nil, err
	}
	cp := new(graph.Checkpoint)
	if err := json.Unmarshal(meta, cp); err != nil {
		return nil, fmt.Errorf("decode checkpoint: %w", err)
	}
	return cp, nil
}

// rawMessages converts a script's list of strings.
func rawMessages(items []any) ([]json.RawMessage, error) {
	entries := make([]string, len(items))
	for i, item := range items {
		s, ok := item.(string)
		if !ok {
			return nil, fmt.Errorf("journal entry %d is a %T, not a string", i, item)
		}
		entries[i] = s
	}
	return journalOf(entries), nil
}

// runScript runs a script that writes what a side effect depends on. With
// Options.Replicas set, it is sent with a WAIT on the same connection in
// one round trip, and fails with ErrNotReplicated unless enough replicas
// acknowledged it.
//
// On a cluster that connection is the slot's master's, as this client
// last knew it. When that node answers that the script did not run there
// — the slot moved (MOVED, ASK: a failover), the cluster is settling
// (TRYAGAIN, CLUSTERDOWN), or the node refused the connection — the
// cluster's map is refreshed and the script sent again, to the slot's
// current master, for up to redirectFor. An answer lost after it was
// sent is never sent again: it is returned.
func (s *Store) runScript(ctx context.Context, script *redis.Script, src string, keys []string, args ...any) *redis.Cmd {
	if s.replicas <= 0 {
		return s.eval(ctx, script, src, keys, args)
	}
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return s.evalAndWait(ctx, s.rdb, src, keys, args)
	}
	deadline := time.Now().Add(redirectFor)
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 500*time.Millisecond) {
		res := redis.NewCmd(ctx)
		master, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			res.SetErr(err)
		} else {
			res = s.evalAndWait(ctx, master, src, keys, args)
		}
		if !notRun(res.Err()) || time.Now().Add(backoff).After(deadline) {
			return res
		}
		cc.ReloadState(ctx)
		select {
		case <-ctx.Done():
			return res
		case <-time.After(backoff):
		}
	}
}

// eval is script.Run (EVALSHA, and EVAL if the server does not have
// the script) with the command's arguments in a slice of the pool's:
// go-redis would make one of its own at every call, next to the
// caller's, and the scripts on a save's path send dozens. The slice is
// back in the pool when eval returns: the reply is the command's own,
// and nothing reads the command's arguments after it ran.
func (s *Store) eval(ctx context.Context, script *redis.Script, src string, keys []string, args []any) *redis.Cmd {
	buf := evalArgs.Get().(*[]any)
	defer func() {
		clear(*buf)
		if cap(*buf) <= maxPooledArgs {
			evalArgs.Put(buf)
		}
	}()
	a := append((*buf)[:0], "evalsha", script.Hash(), len(keys))
	for i := range keys {
		// A key put in an interface is copied to the heap; a pointer
		// to it is not, and go-redis writes it the same. The first
		// stays a string: a cluster client reads it to find the slot.
		if i == 0 {
			a = append(a, keys[0])
		} else {
			a = append(a, &keys[i])
		}
	}
	a = append(a, args...)
	*buf = a
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	if err := s.rdb.Process(ctx, cmd); err == nil || !errors.Is(err, redis.ErrNoScript) && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return cmd
	}
	a[0], a[1] = "eval", src
	cmd = redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = s.rdb.Process(ctx, cmd)
	return cmd
}

// evalArgs holds the slices eval builds commands in; maxPooledArgs
// bounds the ones kept, so that a save of a long journal does not keep
// its slice for good.
var evalArgs = sync.Pool{New: func() any { return new([]any) }}

const maxPooledArgs = 256

// redirectFor is how long runScript follows a cluster's slot to its
// current master: longer than a manual failover takes, shorter than
// Slack's patience with a click.
const redirectFor = 2500 * time.Millisecond

// notRun reports whether err says a script was not run because the node
// does not serve its slot now, or could not be reached at all.
func notRun(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// evalAndWait sends a script and a WAIT for the store's replicas to node
// in one round trip. In a slot with a write no replica is known to have
// (replicas.go), it sets the slot's sync key between the two, so that
// the WAIT waits for that write too even when the script writes nothing
// (a resend that recognises its first attempt).
func (s *Store) evalAndWait(ctx context.Context, node redis.Cmdable, src string, keys []string, args []any) *redis.Cmd {
	var res, wait *redis.Cmd
	tag := ""
	if len(keys) > 0 {
		tag = hashTag(keys[0])
	}
	barrier := tag != "" && s.unsynced.has(tag, time.Now())
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		res = p.Eval(ctx, src, keys, args...)
		if barrier {
			p.Set(ctx, s.syncKey(tag), "1", time.Minute)
		}
		wait = p.Do(ctx, "WAIT", s.replicas, s.replicaWait.Milliseconds())
		return nil
	})
	if err != nil && res.Err() == nil && wait.Err() != nil {
		res.SetErr(wait.Err())
	}
	if res.Err() == nil && wait.Err() == nil {
		n, _ := wait.Int64()
		if err := s.replicated(ctx, node, n); err != nil {
			res.SetErr(err)
		}
	}
	switch err := res.Err(); {
	case tag == "":
	case err == nil:
		if barrier {
			s.unsynced.clear(tag)
		}
	case errors.Is(err, ErrNotReplicated) || answerLost(err):
		s.unsynced.mark(tag, time.Now())
	}
	return res
}
