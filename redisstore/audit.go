package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/audit"
)

// The audit trail: a stream of entries chained by hashes (package audit)
// and the chain's head beside it. Entries are sealed in Go — seq, prev,
// hash — against the head this process last saw, and appended by a
// script only if the stored head is still that one: a compare-and-set
// that keeps the chain from forking however many replicas append at
// once. A script that finds another head writes nothing and returns it;
// the entry is sealed again against it and retried. So that a replica
// appends in one round trip, the Store remembers the head of its last
// append.
//
// On a single server the claim of a decision and the end of a session
// append their entries in their own scripts (sessions.go); when the head
// has moved the entries are appended afterwards. On Redis Cluster the
// stream and its head share a slot of their own (the head's hash tag is
// the stream's name) and appends are scripts of their own.

// DefaultAuditRetention is how long audit entries are kept when
// Options.AuditRetention is not set.
const DefaultAuditRetention = 90 * 24 * time.Hour

// auditPage is how many entries one read of the stream returns.
const auditPage = 1000

// maxAuditAttempts bounds the retries of an append that finds the head
// moved: each retry follows a head that another process just wrote.
const maxAuditAttempts = 100

// ErrAuditContention: an append found the chain's head moved on every
// attempt.
var ErrAuditContention = errors.New("the audit chain's head kept moving")

var _ interface {
	Audit(ctx context.Context, fields map[string]string) error
	AuditAll(ctx context.Context, records []map[string]string) error
} = (*Store)(nil)

func (s *Store) auditKey() string     { return s.auditStream }
func (s *Store) auditHeadKey() string { return s.auditHead }

// auditMinID is the stream ID (its unix ms) below which entries are older
// than the retention.
func (s *Store) auditMinID() string {
	return strconv.FormatInt(s.now().Add(-s.auditRetention).UnixMilli(), 10)
}

// Audit appends one entry to the audit trail. fields may not use the
// names id, time, seq, prev, hash or fields (audit.ErrReservedField); empty
// values are left out, and "at" is set to now if missing. Safe for
// concurrent use by many goroutines and processes: the entries of all of
// them form one chain.
func (s *Store) Audit(ctx context.Context, fields map[string]string) error {
	return s.AuditAll(ctx, []map[string]string{fields})
}

// AuditAll appends entries to the audit trail, in order, in one round
// trip (when the head has not moved).
func (s *Store) AuditAll(ctx context.Context, records []map[string]string) error {
	if len(records) == 0 {
		return nil
	}
	s.auditMu.Lock()
	defer s.auditMu.Unlock()
	for range maxAuditAttempts {
		block, err := s.auditBlock(records)
		if err != nil {
			return err
		}
		res, err := s.runScript(ctx, s.auditScript, auditLua, []string{s.auditKey(), s.auditHeadKey()}, append([]any{s.auditMinID()}, block...)...).Result()
		if err != nil && !(errors.Is(err, ErrNotReplicated) && res != nil) {
			return fmt.Errorf("audit: %w", err)
		}
		appended, lerr := s.learnAuditHead(res)
		if lerr != nil {
			return lerr
		}
		if err != nil && appended {
			// On the master, not (yet) on a replica.
			kept, err := s.settleAudit(ctx, replyHead(res))
			if err != nil {
				return fmt.Errorf("audit: %w", err)
			}
			if !kept {
				continue // a failover lost them: append them again
			}
		}
		if appended {
			return nil
		}
	}
	return fmt.Errorf("audit: %w", ErrAuditContention)
}

// auditSettleRounds is how many more waits for the replicas an append
// they did not acknowledge gets before AuditAll gives up on it.
const auditSettleRounds = 3

// settleAudit waits until the store's replicas have the chain up to the
// head this process last appended, which they did not acknowledge: it
// writes the slot's sync key with a WAIT (replicas.go), at most
// auditSettleRounds times, and reports whether that head is still in the
// chain then — a failover to a replica that never got it has lost it,
// and its entries are to be appended again (the chain then has them once,
// and no seq twice). Appending them again before the replicas say
// anything would put them in the chain twice should the master live on.
// It returns ErrNotReplicated if the replicas never acknowledged.
func (s *Store) settleAudit(ctx context.Context, last audit.Head) (kept bool, err error) {
	tag := hashTag(s.auditKey())
	for range auditSettleRounds {
		var n int64
		n, err = s.runScript(ctx, auditSyncScript, auditSyncLua, []string{s.auditKey(), s.auditHeadKey(), s.syncKey(tag)},
			last.Hash, last.Seq).Int64()
		if err == nil {
			return n == 1, nil
		}
		if !errors.Is(err, ErrNotReplicated) {
			return false, err
		}
	}
	return false, err
}

// replyHead is the head in auditLua's reply (learnAuditHead has read
// it).
func replyHead(reply any) audit.Head {
	res, _ := reply.([]any)
	if len(res) != 3 {
		return audit.Head{}
	}
	hash, _ := res[1].(string)
	return audit.Head{Hash: hash, Seq: replySeq(res[2])}
}

// replySeq is the seq in auditAppendLua's reply: an integer, or the
// decimal string the entry was given (the script returns it as it is).
func replySeq(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// auditSyncLua writes the slot's sync key, for a WAIT after it, and
// reports whether the entry with the given hash and seq is in the chain:
// it is the head, or one of the entries after it up to the head (at most
// 1000 looked at, a page of auditPage; past that it is taken for there).
//
//	KEYS: audit stream, audit head, sync key
//	ARGV: the entry's hash, its seq
const auditSyncLua = `
redis.call('SET', KEYS[3], '1', 'PX', 60000)
local h = redis.call('HMGET', KEYS[2], 'hash', 'seq')
local seq, want = tonumber(h[2]) or 0, tonumber(ARGV[2])
if seq < want then return 0 end
if h[1] == ARGV[1] then return 1 end
if seq - want >= 1000 then return 1 end
for _, e in ipairs(redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', seq - want + 1)) do
  local f = e[2]
  for i = 1, #f - 1, 2 do
    if f[i] == 'hash' and f[i + 1] == ARGV[1] then return 1 end
  end
end
return 0
`

var auditSyncScript = redis.NewScript(auditSyncLua)

// auditBlock seals records against the head this process last saw and
// returns them as the arguments of auditAppendLua's block: each entry
// packed (audit.SealPacked), its seq, its hash and its packed fields. A
// record without "at" gets the time now.
//
// The block's strings go in as pointers into one slice of their own:
// a string put in an interface is copied to the heap, and go-redis
// writes a *string as it writes a string. (Nothing reads the arguments
// back but go-redis and the hooks that count what they send.)
func (s *Store) auditBlock(records []map[string]string) ([]any, error) {
	s.chainMu.Lock()
	head := s.chain
	s.chainMu.Unlock()
	sealed := make([]audit.Packed, len(records)+1)
	sealed[len(records)].Hash = head.Hash // the head the block follows
	at := ""
	for i, rec := range records {
		if _, ok := rec["at"]; !ok {
			if at == "" {
				at = s.now().UTC().Format(time.RFC3339Nano)
			}
			rec = withField(rec, "at", at)
		}
		p, next, err := audit.SealPacked(rec, head)
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		sealed[i], head = p, next
	}
	args := make([]any, 0, 2+3*len(records))
	args = append(args, &sealed[len(records)].Hash, len(records))
	for i := range records {
		args = append(args, &sealed[i].Seq, &sealed[i].Hash, &sealed[i].Fields)
	}
	return args, nil
}

func withField(rec map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(rec)+1)
	for f, x := range rec {
		out[f] = x
	}
	out[k] = v
	return out
}

// auditReply returns audit_append's three values where a script's reply
// holds them, from res[i] on, as learnAuditHead reads them; nil when the
// script appended nothing (it holds nil there).
func auditReply(res []any, i int) any {
	if len(res) < i+3 || res[i] == nil {
		return nil
	}
	return res[i : i+3 : i+3]
}

// learnAuditHead reads auditAppendLua's reply, remembers the head it
// names, and reports whether the entries were appended.
func (s *Store) learnAuditHead(reply any) (bool, error) {
	res, _ := reply.([]any)
	if len(res) != 3 {
		return false, fmt.Errorf("audit: unexpected reply %v", reply)
	}
	hash, _ := res[1].(string)
	seq := replySeq(res[2])
	appended := res[0] == int64(1)
	s.chainMu.Lock()
	// A head that did not take the entries is the store's as of now,
	// even if older than one this process wrote since (the head was
	// reset); one that took them is newer than any other this process
	// saw unless a later append already returned.
	if !appended || seq > s.chain.Seq {
		s.chain = audit.Head{Hash: hash, Seq: seq}
	}
	s.chainMu.Unlock()
	return appended, nil
}

// AuditHead returns the audit chain's head as stored.
//
// With Options.Replicas, the head returned is one the replicas have: the
// read writes the audit slot's sync key and waits for them in the same
// round trip (a WAIT covers every write the master made before). When
// they do not acknowledge it in time, AuditHead returns the master's head
// with ErrNotReplicated: that head may not outlive a failover, and is not
// one to note elsewhere. Without Replicas it is one HGETALL, as ever.
func (s *Store) AuditHead(ctx context.Context) (audit.Head, error) {
	if s.replicas <= 0 {
		h, err := s.rdb.HGetAll(ctx, s.auditHeadKey()).Result()
		if err != nil {
			return audit.Head{}, fmt.Errorf("read the audit head: %w", err)
		}
		return parseAuditHead(h)
	}
	cmd := s.runScript(ctx, auditHeadSyncScript, auditHeadSyncLua, []string{s.auditHeadKey(), s.syncKey(hashTag(s.auditKey()))})
	flat, _ := cmd.Val().([]any)
	if err := cmd.Err(); err != nil && (flat == nil || !errors.Is(err, ErrNotReplicated)) {
		return audit.Head{}, fmt.Errorf("read the audit head: %w", err)
	}
	h := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		h[k] = v
	}
	head, err := parseAuditHead(h)
	if err != nil {
		return audit.Head{}, err
	}
	if err := cmd.Err(); err != nil {
		return head, fmt.Errorf("read the audit head: %w", err)
	}
	return head, nil
}

// ConfirmAudit waits, with Options.Replicas, until the replicas have
// every write the audit slot's master made so far — what VerifyAudit read
// before it included — or returns ErrNotReplicated. It writes the slot's
// sync key, with a WAIT, in one round trip; without Replicas it does
// nothing.
func (s *Store) ConfirmAudit(ctx context.Context) error {
	if s.replicas <= 0 {
		return nil
	}
	if err := s.runScript(ctx, syncScript, syncLua, []string{s.syncKey(hashTag(s.auditKey()))}).Err(); err != nil {
		return fmt.Errorf("confirm the audit trail on the replicas: %w", err)
	}
	return nil
}

// syncLua writes a slot's sync key, so that a WAIT after it waits for
// every write before.
//
//	KEYS: sync key
const syncLua = `
redis.call('SET', KEYS[1], '1', 'PX', 60000)
return 1
`

var syncScript = redis.NewScript(syncLua)

// auditHeadSyncLua writes the audit slot's sync key, so that a WAIT
// after it waits for every write before, and returns the audit head's
// fields (HGETALL).
//
//	KEYS: audit head, sync key
const auditHeadSyncLua = `
redis.call('SET', KEYS[2], '1', 'PX', 60000)
return redis.call('HGETALL', KEYS[1])
`

var auditHeadSyncScript = redis.NewScript(auditHeadSyncLua)

func parseAuditHead(h map[string]string) (audit.Head, error) {
	var out audit.Head
	out.Hash = h["hash"]
	for k, p := range map[string]*int64{"seq": &out.Seq, "trimmed": &out.Trimmed} {
		if v, ok := h[k]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return audit.Head{}, fmt.Errorf("the audit head's %s %q is not a number", k, v)
			}
			*p = n
		}
	}
	return out, nil
}

// AuditEntries returns up to n audit entries, oldest first: from the
// oldest kept, or those added at or after since, and only those after
// the entry with ID after when it is set.
func (s *Store) AuditEntries(ctx context.Context, after string, since time.Time, n int) ([]audit.Entry, error) {
	start := "-"
	if !since.IsZero() {
		start = strconv.FormatInt(since.UnixMilli(), 10) + "-0"
	}
	if after != "" && (start == "-" || !idBefore(after, start)) {
		start = "(" + after
	}
	msgs, err := s.rdb.XRangeN(ctx, s.auditKey(), start, "+", int64(n)).Result()
	if err != nil {
		return nil, fmt.Errorf("read the audit trail: %w", err)
	}
	return auditEntries(msgs), nil
}

// auditEntries reads the stream's entries, packed (audit.Unpack) or
// kept one field each as earlier versions kept them. A packed entry that
// does not unpack is read as stored: its hash then does not match.
func auditEntries(msgs []redis.XMessage) []audit.Entry {
	out := make([]audit.Entry, len(msgs))
	for i, m := range msgs {
		out[i] = audit.Entry{ID: m.ID, Fields: auditFields(m.Values)}
	}
	return out
}

// auditFields are the fields of a stream entry of the audit trail.
func auditFields(values map[string]any) map[string]string {
	fields := make(map[string]string, len(values))
	for k, v := range values {
		fields[k], _ = v.(string)
	}
	fields, _ = audit.Unpack(fields)
	return fields
}

// idBefore reports whether stream ID a sorts before b.
func idBefore(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || am == bm && as < bs
}

func splitID(id string) (uint64, uint64) {
	ms, seq, _ := strings.Cut(id, "-")
	m, _ := strconv.ParseUint(ms, 10, 64)
	n, _ := strconv.ParseUint(seq, 10, 64)
	return m, n
}

// VerifyAudit walks the audit chain from the oldest kept entry to the
// head, reading the head and the first entries at one instant so that
// appends and trimming meanwhile do not look like breaks. It returns
// what it verified and the first break (an *audit.BreakError), if any;
// then, if the chain does not hold one of the anchors, an
// *audit.AnchorError.
func (s *Store) VerifyAudit(ctx context.Context, anchors ...audit.Anchor) (audit.Report, error) {
	var headCmd *redis.MapStringStringCmd
	var first *redis.XMessageSliceCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		headCmd = p.HGetAll(ctx, s.auditHeadKey())
		first = p.XRangeN(ctx, s.auditKey(), "-", "+", auditPage)
		return nil
	})
	if err != nil {
		return audit.Report{}, fmt.Errorf("read the audit trail: %w", err)
	}
	head, err := parseAuditHead(headCmd.Val())
	if err != nil {
		return audit.Report{}, err
	}
	v := audit.Verifier{Anchors: anchors}
	page := auditEntries(first.Val())
	for len(page) > 0 {
		for _, e := range page {
			// The entry after the head, and those after it, were
			// appended after the head was read.
			if seq, ok := e.Seq(); ok && head.Seq > 0 && seq == head.Seq+1 && e.Fields[audit.FieldPrev] == head.Hash {
				return v.Finish(&head)
			}
			if err := v.Add(e); err != nil {
				return v.Finish(&head)
			}
		}
		if page, err = s.AuditEntries(ctx, page[len(page)-1].ID, time.Time{}, auditPage); err != nil {
			return audit.Report{}, err
		}
	}
	return v.Finish(&head)
}

// auditAppendLua is the Lua function that appends sealed entries if the
// chain's head is the one they were sealed after, and trims entries older
// than the retention; scripts that append entries begin with it.
//
//	audit_append(stream, head, minid, a, i, lazy, prev)
//	  stream, head  the keys
//	  minid         unix ms: entries added before are trimmed ('' or '0': none)
//	  a[i]          the head's hash the entries were sealed after ('' for none),
//	                unless prev is given: then that hash, and a[i] is not read
//	  a[i+1]        the number m of entries, then for each: its seq, its
//	                hash and its packed fields (audit.SealPacked), which
//	                the entry keeps as the stream fields seq, hash and
//	                fields
//
// It returns 1, the new head's hash and seq when it appended them, and 0,
// the head's hash and seq when the head is another (nothing written); a
// seq is a number or the decimal string the block gave (replySeq):
// three values, not a table, which scripts put in their replies as they
// are (a script's reply costs Redis more for each table it holds).
// Before trimming, it records in the head's "trimmed" the seq of the
// newest entry to go, so that a verifier can tell entries retention
// removed from entries deleted. The minimum ID never passes the entry
// just added, whatever the clocks say. The head's "oldest" keeps the
// time (unix ms) of the stream's oldest entry, so that an append that
// trims nothing reads no entry to find that out; a head without it (an
// earlier version's) gets it from the stream once.
//
// A script that appends twice (a decision's entry, then its save's) reads
// the head once: an append that trimmed nothing keeps the head it wrote
// (audit_known), which the next append in the same script takes as read,
// since only audit_append writes the head and a script runs alone.
//
// Such a script may also write the head once: an append given lazy that
// trims nothing leaves the head's write pending (audit_pending) for the
// next append in the script, which writes its own head instead, or for
// audit_flush (auditFlushLua), which the script calls on every way out
// that has no next append. The entries and the head are then written in
// one script all the same; in between, the script runs no command that
// can fail on a key it has not already used.
const auditAppendLua = `
local audit_known_head, audit_known, audit_pending = nil, nil, nil
local function audit_append(stream, head, minid, a, i, lazy, prev)
  local h, pending = nil, nil
  prev = prev or a[i]
  if audit_known_head == head then
    h, pending = audit_known, audit_pending
  elseif audit_pending then
    redis.call('HSET', audit_pending, 'hash', audit_known[1], 'seq', audit_known[2])
  end
  audit_known_head, audit_known, audit_pending = nil, nil, nil
  if not h then h = redis.call('HMGET', head, 'hash', 'seq', 'oldest', 'trimmed') end
  local cur, m = h[1] or '', a[i + 1]
  if pending and (cur ~= prev or m == '0') then
    redis.call('HSET', pending, 'hash', h[1], 'seq', h[2])
  end
  if cur ~= prev then return 0, cur, tonumber(h[2]) or 0 end
  local id, last, lastseq = nil, cur, nil
  if m == '1' then
    -- One entry, most appends: no count to convert.
    id = redis.call('XADD', stream, '*', 'seq', a[i + 2], 'hash', a[i + 3], 'fields', a[i + 4])
    last, lastseq = a[i + 3], a[i + 2]
  else
    local j = i + 2
    for _ = 1, tonumber(m) do
      id = redis.call('XADD', stream, '*', 'seq', a[j], 'hash', a[j + 1], 'fields', a[j + 2])
      last, lastseq = a[j + 1], a[j]
      j = j + 3
    end
  end
  if not id then return 1, cur, tonumber(h[2]) or 0 end
  -- Most appends trim nothing: the oldest entry is within the retention.
  -- They write the head's hash and seq alone, as the strings they were
  -- given (a number passed to redis.call is formatted, at a cost), and
  -- return the seq as that string. The oldest entry's time and the
  -- minimum ID are unix ms written as decimal integers: of one length,
  -- the strings compare as the numbers do, with no conversion.
  local old = h[3]
  if old and (minid == '' or minid == '0' or #minid < #old or (#minid == #old and minid <= old)) then
    if lazy then
      audit_pending = head
    else
      redis.call('HSET', head, 'hash', last, 'seq', lastseq)
    end
    audit_known_head, audit_known = head, {last, lastseq, h[3], h[4]}
    return 1, last, lastseq
  end
  local first = tonumber(old)
  local added = tonumber(string.match(id, '^%d+'))
  minid = math.min(tonumber(minid) or 0, added)
  if not first then
    local e = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1]
    first = e and tonumber(string.match(e[1], '^%d+')) or added
  end
  local trimmed = false
  if minid > 0 and first < minid then
    local gone = redis.call('XREVRANGE', stream, '(' .. minid .. '-0', '-', 'COUNT', 1)[1]
    if gone then
      local f = gone[2]
      for n = 1, #f - 1, 2 do
        local seq = f[n] == 'seq' and tonumber(f[n + 1])
        if seq and seq > (tonumber(h[4]) or 0) then trimmed = seq end
      end
    end
    redis.call('XTRIM', stream, 'MINID', minid .. '-0')
    local e = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1]
    first = e and tonumber(string.match(e[1], '^%d+')) or added
  end
  if trimmed then
    redis.call('HSET', head, 'hash', last, 'seq', lastseq, 'oldest', first, 'trimmed', trimmed)
  else
    redis.call('HSET', head, 'hash', last, 'seq', lastseq, 'oldest', first)
  end
  return 1, last, tonumber(lastseq)
end
`

// auditFlushLua defines audit_flush(), which writes the head an append
// given lazy left pending (auditAppendLua), if any. A script that passes
// lazy defines it after auditAppendLua and calls it on every way out
// that has no append after the lazy one.
const auditFlushLua = `
local function audit_flush()
  if audit_pending then
    redis.call('HSET', audit_pending, 'hash', audit_known[1], 'seq', audit_known[2])
    audit_pending = nil
  end
end
`

// auditLua appends entries on their own.
//
//	KEYS: audit stream, audit head
//	ARGV: minimum ID (unix ms), then audit_append's block
//
// It returns audit_append's three values as a list.
const auditLua = auditAppendLua + `
return {audit_append(KEYS[1], KEYS[2], ARGV[1], ARGV, 2)}
`
