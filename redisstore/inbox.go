package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/runner"
)

// The inbox (runner.Inbox): the calls that wait for a person, and each
// person's recent decisions, with who has opened the Slack Home tab that
// shows them. Its keys share the hash tag {inbox}, so one script writes
// them together on a single server and on Redis Cluster alike:
//
//	cs:{inbox}:calls            hash  thread → the thread's waiting calls, a JSON list of
//	                                  lists of their fields (inboxcodec.go)
//	cs:{inbox}:decided:<user>   list  the user's decisions (JSON), newest first, capped
//	                                  at runner.RecentLimit (trimmed back when twice that); expires with the threads
//	cs:{inbox}:home             zset  user → when they last opened the Home tab (unix ms)
//
// The runner replaces a thread's entry when a session on it ends; on a
// single server without replicas to wait for, CloseThread sends the
// update in the same round trip as the rest of the session's end.
//
// An update also says who opened the Home tab (InboxUpdate.Watchers),
// whose tabs the change may concern. It reads only the openings since
// shortly before the newest this Store has read, and keeps the rest in
// memory (homeWatchers): the index of openers has an entry per person
// who opened the tab within the TTL, and reading all of it at every
// update would cost each update, twice a turn, as much as people use
// the bot.

var _ runner.Inbox = (*Store)(nil)

// updateInboxFnLua writes runner.RecentLimit, 20, in its text: these
// fail to compile if it changes.
var (
	_ [runner.RecentLimit - 20]struct{}
	_ [20 - runner.RecentLimit]struct{}
)

func (s *Store) inboxKey(name string) string { return s.prefix + ":{inbox}:" + name }

func (s *Store) decidedKey(user string) string { return s.inboxKey("decided:" + escape(user)) }

// inboxArgs are the keys and arguments of updateInboxLua for u.
func (s *Store) inboxArgs(u *runner.InboxUpdate) ([]string, []any, error) {
	if u.Thread == "" {
		return nil, nil, ErrEmptyThread
	}
	var value []byte // go-redis sends nil as an empty string: no calls wait
	if len(u.Waiting) > 0 {
		raw, err := encodeWaiting(u.Thread, u.Waiting)
		if err != nil {
			return nil, nil, err
		}
		value = raw
	}
	keys := make([]string, 2, 2+len(u.Decided))
	keys[0], keys[1] = s.inboxCalls, s.inboxHome // inboxKey("calls"), inboxKey("home")
	// The thread goes in as a pointer to u's own: a string in an
	// interface would be a copy on the heap.
	args := make([]any, 4, 4+len(u.Decided))
	args[0], args[1], args[2], args[3] = &u.Thread, value, s.ttl.Milliseconds(), s.home.since()
	for _, d := range u.Decided {
		if d.By == "" {
			continue
		}
		raw, err := encodeDecided(d)
		if err != nil {
			return nil, nil, err
		}
		keys = append(keys, s.decidedKey(d.By))
		args = append(args, raw)
	}
	return keys, args, nil
}

// UpdateInbox implements runner.Inbox, in one script.
func (s *Store) UpdateInbox(ctx context.Context, u *runner.InboxUpdate) error {
	keys, args, err := s.inboxArgs(u)
	if err != nil {
		return fmt.Errorf("update inbox: %w", err)
	}
	res, err := s.runScript(ctx, s.inboxScript, updateInboxLua, keys, args...).Result()
	return s.replaced(u, res, err)
}

// replaced reads updateInboxLua's reply into u.Replaced and u.Watchers.
func (s *Store) replaced(u *runner.InboxUpdate, res any, err error) error {
	u.Replaced, u.Watchers = nil, nil
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update inbox of %s: %w", u.Thread, err)
	}
	if res == nil {
		return nil
	}
	reply, _ := res.([]any)
	if len(reply) != 2 {
		return fmt.Errorf("update inbox of %s: unexpected reply %v", u.Thread, res)
	}
	watchers, _ := reply[1].([]any)
	u.Watchers = s.home.learn(watchers, s.ttl.Milliseconds())
	old, _ := reply[0].(string)
	if old == "" {
		return nil
	}
	if u.Replaced, err = decodeWaiting(u.Thread, []byte(old)); err != nil {
		return fmt.Errorf("update inbox of %s: the entry it replaced: %w", u.Thread, err)
	}
	return nil
}

// closeWithInbox runs the close script (keys, args) and the inbox update
// u as one script (closeInboxLua), the update first so that it is
// written while the lease is still held; runScript waits for replicas
// when writes must. On Redis Cluster the two are in other slots, so the
// update is written first, on its own (and waits for its replicas as
// well).
func (s *Store) closeWithInbox(ctx context.Context, keys []string, args []any, u *runner.InboxUpdate) (any, error) {
	ikeys, iargs, err := s.inboxArgs(u)
	if err != nil {
		return nil, fmt.Errorf("update inbox: %w", err)
	}
	if s.isCluster() {
		// With replicas to wait for, the update waits for them too
		// (runScript): a failover must not lose a waiting call from
		// the Home tab. Without, it is one EVALSHA, as ever.
		ires, ierr := s.runScript(ctx, s.inboxScript, updateInboxLua, ikeys, iargs...).Result()
		ierr = s.replaced(u, ires, ierr)
		res, err := s.runScript(ctx, s.closeScript, closeLua, keys, args...).Result()
		if err != nil {
			return nil, err
		}
		return res, ierr
	}
	// One script: the update, then the close.
	allKeys := append(append(make([]string, 0, len(ikeys)+len(keys)), ikeys...), keys...)
	allArgs := append(append(append(make([]any, 0, 2+len(iargs)+len(args)), len(ikeys), len(iargs)), iargs...), args...)
	res, err := s.runScript(ctx, closeInboxScript, closeInboxLua, allKeys, allArgs...).Result()
	if err != nil {
		return nil, err
	}
	reply, _ := res.([]any)
	if len(reply) < 3 {
		return nil, fmt.Errorf("close thread %s: unexpected reply %v", u.Thread, res)
	}
	var old any
	if len(reply) > 3 {
		old = reply[3]
	}
	return reply[:3], s.replaced(u, old, nil)
}

// InboxEntries implements runner.Inbox: one HGETALL.
func (s *Store) InboxEntries(ctx context.Context) ([]runner.InboxEntry, error) {
	all, err := s.rdb.HGetAll(ctx, s.inboxKey("calls")).Result()
	if err != nil {
		return nil, fmt.Errorf("read the inbox: %w", err)
	}
	var out []runner.InboxEntry
	for thread, raw := range all {
		entries, err := decodeWaiting(thread, []byte(raw))
		if err != nil {
			return nil, fmt.Errorf("read the inbox entry of %s: %w", thread, err)
		}
		out = append(out, entries...)
	}
	return out, nil
}

// RecentDecisions implements runner.Inbox: one LRANGE.
func (s *Store) RecentDecisions(ctx context.Context, user string, n int) ([]runner.DecisionRecord, error) {
	if n <= 0 {
		return nil, nil
	}
	n = min(n, runner.RecentLimit) // the list may hold more until it is trimmed
	raws, err := s.rdb.LRange(ctx, s.decidedKey(user), 0, int64(n)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("read the decisions of %s: %w", user, err)
	}
	out := make([]runner.DecisionRecord, 0, len(raws))
	for _, raw := range raws {
		var d runner.DecisionRecord
		if err := json.Unmarshal([]byte(raw), &d); err != nil {
			return nil, fmt.Errorf("read the decisions of %s: %w", user, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// forgetInbox removes a thread's waiting calls from the inbox.
func (s *Store) forgetInbox(ctx context.Context, thread string) error {
	if err := s.rdb.HDel(ctx, s.inboxKey("calls"), thread).Err(); err != nil {
		return fmt.Errorf("remove %s from the inbox: %w", thread, err)
	}
	return nil
}

// HomeOpened records that user opened the Home tab at, and forgets those
// who have not opened it within the store's TTL.
func (s *Store) HomeOpened(ctx context.Context, user string, at time.Time) error {
	key := s.inboxKey("home")
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, key, redis.Z{Score: float64(at.UnixMilli()), Member: user})
		p.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(at.Add(-s.ttl).UnixMilli(), 10))
		return nil
	})
	if err != nil {
		return fmt.Errorf("record that %s opened the Home tab: %w", user, err)
	}
	return nil
}

// HomeOpeners returns the users who opened the Home tab since then.
func (s *Store) HomeOpeners(ctx context.Context, since time.Time) ([]string, error) {
	users, err := s.rdb.ZRangeByScore(ctx, s.inboxKey("home"), &redis.ZRangeBy{
		Min: strconv.FormatInt(since.UnixMilli(), 10), Max: "+inf",
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("who opened the Home tab: %w", err)
	}
	return users, nil
}

// homeWatchers is who opened the Home tab, as a Store has read it from
// the index of openers (cs:{inbox}:home) with the inbox's updates: each
// update reads the openings from homeOverlap before the newest one read
// so far (all of them the first time), and adds them to those read
// before. Openings are only ever added, or moved later by a person's
// next one, or forgotten once older than the TTL before the newest,
// which the index does too. It is safe for concurrent use.
type homeWatchers struct {
	mu     sync.Mutex
	at     map[string]int64 // user → when they last opened the tab (unix ms)
	newest int64            // the newest opening read (unix ms); 0: none yet
	// list is at as learn returns it, made again when at changes: the
	// updates share it, and read it only.
	list []runner.InboxWatcher
}

// homeOverlap is how far before the newest opening read an update reads
// the openers from: an opening written with a time earlier than that —
// from a process whose clock is behind by more, or a write that took
// longer — is read with the person's next opening of the tab.
const homeOverlap = 10 * time.Minute

// since is the least score of the openings an update reads.
func (h *homeWatchers) since() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.newest == 0 {
		return "-inf"
	}
	return strconv.FormatInt(h.newest-homeOverlap.Milliseconds(), 10)
}

// learn adds the openings an update read (user, unix ms, …) and returns
// all those known: none is an empty list, not nil (the store says who
// watches). It forgets openings older than ttl (ms) before the newest,
// as HomeOpened takes them out of the index: times are the openers' own
// clocks, which readers compare with theirs (InboxChange.WatchersSince).
func (h *homeWatchers) learn(read []any, ttl int64) []runner.InboxWatcher {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.at == nil {
		h.at = make(map[string]int64)
	}
	changed := h.list == nil
	for i := 0; i+1 < len(read); i += 2 {
		user, _ := read[i].(string)
		ms, _ := strconv.ParseInt(fmt.Sprint(read[i+1]), 10, 64)
		if at, ok := h.at[user]; !ok || ms > at {
			h.at[user], changed = ms, true
		}
		h.newest = max(h.newest, ms)
	}
	if !changed {
		return h.list
	}
	out := make([]runner.InboxWatcher, 0, len(h.at))
	for user, ms := range h.at {
		if ms < h.newest-ttl {
			delete(h.at, user)
			continue
		}
		out = append(out, runner.InboxWatcher{User: user, At: time.UnixMilli(ms)})
	}
	h.list = out[:len(out):len(out)] // an append makes a copy
	return h.list
}

// updateInboxLua replaces a thread's waiting calls and records decisions.
//
//	KEYS: the calls hash, the Home tab's openers, then one decisions list
//	      per decision
//	ARGV: thread, the thread's calls (JSON) or '' for none, the lists'
//	      expiry ms, the least time (unix ms, or '-inf') of the openings
//	      to read, then one decision (JSON) per list
//
// The lists' cap (runner.RecentLimit, 20) is written in the script's
// text: a constant of the program costs no argument.
//
// It returns the thread's calls it replaced (or nil), and who opened the
// Home tab since that time, with when (ZRANGEBYSCORE WITHSCORES): those
// whose tabs the change may concern, read in the same step
// (homeWatchers keeps those read before).
const updateInboxLua = updateInboxFnLua + `
return {update_inbox(KEYS, 0, #KEYS, ARGV, 0)}
`

// updateInboxFnLua is updateInboxLua's work as a Lua function of its
// keys and arguments, which closeInboxLua and saveCloseLua share:
// update_inbox(K, ko, ni, A, ao, thread) reads updateInboxLua's ni keys
// from K[ko + 1] and its argument n at A[ao + n], where a script that
// carries them among its own has them (a copy costs Redis a table and a
// write per element), and returns its two values (the entry replaced,
// the openings read) rather than a table of them. Given thread, it takes
// that for its first argument, which is then not read (a save that
// closes sends the thread once, for the close and the inbox).
const updateInboxFnLua = `
local function update_inbox(K, ko, ni, A, ao, thread)
  local calls, value = K[ko + 1], A[ao + 2]
  thread = thread or A[ao + 1]
  -- The entry replaced is read only where there is one: a thread's
  -- first entry is set in one command (HSETNX), and a thread without
  -- one has none to delete.
  local old = false
  if value == '' then
    old = redis.call('HGET', calls, thread)
    if old then redis.call('HDEL', calls, thread) end
  elseif redis.call('HSETNX', calls, thread, value) == 0 then
    old = redis.call('HGET', calls, thread)
    redis.call('HSET', calls, thread, value)
  end
  for i = 3, ni do
    -- A list may grow to twice its cap before it is trimmed back:
    -- readers read the cap's worth, and a trim per decision is spared.
    if redis.call('LPUSH', K[ko + i], A[ao + 2 + i]) > 40 then
      redis.call('LTRIM', K[ko + i], 0, 19)
    end
    redis.call('PEXPIRE', K[ko + i], A[ao + 3])
  end
  return old, redis.call('ZRANGEBYSCORE', K[ko + 2], A[ao + 4], '+inf', 'WITHSCORES')
end
`

// closeInboxLua ends work on a thread and updates its inbox entries in
// one script, on a single server (on a cluster the inbox is in another
// slot): the update first, so that it is written while the lease is
// still held.
//
//	KEYS: updateInboxLua's keys (i of them), then closeLua's
//	ARGV: i, the number u of updateInboxLua's arguments, those u
//	      arguments, then closeLua's
//
// It returns closeLua's reply with, fourth, updateInboxLua's.
const closeInboxLua = auditAppendLua + closeThreadLua + closeReplyLua + updateInboxFnLua + `
local ni, nu = tonumber(ARGV[1]), tonumber(ARGV[2])
local ckeys = {}
for i = ni + 1, #KEYS do ckeys[i - ni] = KEYS[i] end
local old = {update_inbox(KEYS, 0, ni, ARGV, 2)}
local res = close_reply(close_thread(ckeys, ARGV, 2 + nu))
res[4] = old
return res
`

// closeInboxScript is closeInboxLua, shared by every Store.
var closeInboxScript = redis.NewScript(closeInboxLua)
