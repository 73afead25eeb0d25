package redisstore

// The Lua scripts. Each names every key it touches in KEYS, and all of a
// call's keys belong to one thread, so on a cluster each script runs on the
// one node that holds the thread's slot. They run on Redis 7 and on
// miniredis, and use nothing beyond redis.call and Lua 5.1's base library.
//
// What a script costs Redis is mostly not the commands it runs: those
// were a quarter of the instructions of a turn-1 cycle's scripts
// (callgrind, Redis 7.0). The rest is the bridge between Redis and Lua,
// which a script pays for by what it is given, calls and returns. Roughly,
// in instructions of Redis, against about 9,000 for the least EVALSHA:
//
//   - each key and argument, about 800 on average: Redis makes it a Lua
//     string and grows KEYS or ARGV one element at a time. Most of that
//     is a string Lua does not hold yet (a new thread's keys, a
//     checkpoint, a hash, an entry): one it holds (Lua keeps one copy of
//     each string value; a constant, a key of every call, the same value
//     twice in one call) costs a few hundred at most. Trimming 9 such
//     repeated or constant keys and arguments from a turn-1 cycle saved
//     about 6,000 (below). Send what the script needs.
//   - each redis.call, about 2,500 besides the command: its arguments are
//     made Redis strings and its reply a Lua value. A number among its
//     arguments is formatted with %.17g, about 2,800 more: pass the
//     string the script was given, or string.format it once.
//   - each table in the script's reply, 3,500 or more (Redis looks for err,
//     ok, map, set, double... in each): reply with one flat list.
//   - tonumber, about 1,100 (it converts twice): compare the strings when
//     both are written as decimal integers by this package (of one
//     length, < compares them as numbers), compare a count with its
//     usual values first (n == '0'), or let the caller decide (a save
//     is told when to trim the history). Arithmetic on a string that is
//     sure to be a number (s + 0) converts it once, about 500.
//   - a table the script builds grows by doubling, each growth a rehash
//     of several hundred: read keys and arguments where they are, at an
//     offset, rather than copy them, and return values, not a table of
//     them, from a function.
//   - string.match, string.format: several hundred each.
//
// A constant of the program (a cap) is written in the script's text, and
// a key the script does not touch is not sent (the last save's script
// runs on a single server, whose close touches no fence key; a close
// that appends no audit entry is sent neither the audit keys nor the
// minimum ID). A value that several parts of one script need is sent
// once: a save that closes takes the thread and the claims' expiry for
// its close and inbox from one argument each, and a second audit block
// chained to the first is not sent the hash it follows. The length of a
// script's text costs nothing per call; a local function it defines,
// used or not, a few hundred (its closure is made at each call).
//
// What is sent but could be worked out in the script is sent when
// working it out costs more: an audit entry's seq (the head's plus one)
// is arithmetic and a number formatted for XADD, about 3,300, against
// 800 to 1,150 for the argument; a journal's length likewise. Redis 7.0
// has no command that sets a list's or a hash's value and expiry
// together (HSETEX, HGETDEL are Redis 8): a new thread's three PEXPIRE
// stay.
//
// A turn-1 approval cycle (cyclebench -impl runner) sends four scripts:
// the pause (the first save, which ends the session), the claim with
// the running save, the outcome's save and the answer's save, which
// ends the session. They take 129 keys and arguments (33, 40, 17 and
// 39) and run 39 commands (10, 9, 5 and 15). Replayed in order from a
// capture of 320 cycles (MONITOR) into a redis-server 7.0 under
// callgrind, EVALSHA alone, they cost 643,000 instructions a cycle,
// where with 138 keys and arguments they cost 651,000 (the same
// capture replays within 1,000). Measured live under callgrind, a
// cycle also counts a fifth script most of the time (the answer's
// delivery, recorded after the close when callgrind slows Redis), and
// varies by several thousand a run: 694,000 to 696,000, where it was
// 705,000 to 711,000, and with 155 keys and arguments and 46 commands
// about 897,000. Replayed one script at a time (the others sent as
// EVAL, which callgrind does not count here), the pause costs 161,000,
// the claim with the running save 206,000 (209,000 with 42 keys and
// arguments), the outcome's save 75,000 and the answer's save 201,000
// (204,000 with 41); the pause's 5 keys and arguments fewer (the audit
// keys and minimum ID, the repeated thread and expiry) saved nothing
// measurable. tonumber runs 4 times a cycle, where it ran 64. Of the
// instructions, about 150,000 make KEYS and ARGV, about 205,000 are the
// commands themselves (the 3 ZADD of the wake-up schedule alone about
// 35,000), and the rest is Lua, the bridge and the replies.

// headLua reads the head (head.go): claims_head(claims, extra) reads the
// claims hash: the head's {seq, id, journal_len, expiry} (nil if the
// hash holds no head) and, given a list of other claims (extra, may be
// nil), their values. head_id(claims, head) returns the ID alone, from
// the claims hash or the head key of a thread saved before the head
// moved there.
const headLua = `
local function claims_head(claims, extra)
  local h, vals
  if extra and #extra > 0 then
    h = redis.call('HMGET', claims, '` + headSeq + `', '` + headID + `', '` + headLen + `', '` + headExp + `', unpack(extra))
    vals = {}
    for i = 1, #extra do vals[i] = h[4 + i] end
  else
    h = redis.call('HMGET', claims, '` + headSeq + `', '` + headID + `', '` + headLen + `', '` + headExp + `')
  end
  return h, vals
end

local function head_id(claims, head)
  return redis.call('HGET', claims, '` + headID + `') or redis.call('HGET', head, 'id')
end
`

// saveLua is Save's compare-and-set.
//
//	KEYS: head, journal, history, claims, lease
//	ARGV: seq, journal_from, journal_len, checkpoint JSON, the history's
//	      last index to keep if this save trims it (else ''), expiry in
//	      ms, refresh time (unix ms), fence, checkpoint ID, parent ID,
//	      the expiry if refreshed (unix ms: now plus the expiry), then
//	      the new journal entries
//
// It returns 1 when it saved and 0, having written nothing, when the head's
// seq is not seq-1, its ID (when it has one) not the parent's, or the
// journal's length is not journal_from; -1, having written nothing, when a
// fence (a lease token) is given and the lease does not hold it.
//
// Expiries are set only when the head's falls before the refresh time
// (or the thread is new): successive saves of a run, seconds apart,
// then cost no write per key. The caller gives the times and says when
// the history is trimmed (Store.historyTrim), so that the script
// converts no number on a save's common path. A journal that this save creates gets the
// head's expiry. Entries are pushed in batches because unpack puts every
// value on Lua's stack, which holds a few thousand.
//
// Sent again after its answer was lost, it finds the head is this save's
// checkpoint ID (IDs are random: no other save writes it) and returns 1,
// having written nothing, as its first attempt did.
const saveLua = saveCheckpointLua + `
local saved, left, moved, kept = save_check(KEYS, ARGV)
if saved ~= 1 then
  if saved == 0 and ` + saveHeadIDLua + ` == ARGV[9] then return 1 end
  return saved
end
save_write(KEYS, ARGV, 12, left, moved, kept)
return 1
`

// saveAuditLua is saveLua that also appends audit entries (a call's
// execution) when it saves, in the same step: after the save's checks and
// before its writes, so that entries it cannot append leave the thread
// as it was (the script fails).
//
//	KEYS: saveLua's, then audit stream, audit head
//	ARGV: saveLua's first 11, then the audit minimum ID, the number a of
//	      audit arguments, a arguments (audit_append's block), then the new
//	      journal entries
//
// It returns {saveLua's reply} when it did not save, else {1, then
// audit_append's three values}. Sent again after its answer was lost, it
// answers as saveLua does, with what its first attempt appended
// (audit_had).
const saveAuditLua = auditAppendLua + saveCheckpointLua + `
local saved, left, moved, kept = save_check(KEYS, ARGV)
if saved ~= 1 then
  if saved == 0 and ` + saveHeadIDLua + ` == ARGV[9] then
    ` + auditHadLua + `
    return {1, audit_had(KEYS[6], KEYS[7], ARGV, 14)}
  end
  return {saved}
end
local appended, hash, seq = audit_append(KEYS[6], KEYS[7], ARGV[12], ARGV, 14)
save_write(KEYS, ARGV, 14 + tonumber(ARGV[13]), left, moved, kept)
return {1, appended, hash, seq}
`

// saveCheckpointLua is saveLua's work as Lua functions of its keys and
// arguments: save_check returns 1, the thread's expiry (unix ms, a
// string) when kept beside the head, else its time to live (ms),
// whether the head is still in the head key of before, whether the
// thread's expiry was kept beside the head, and the values of the claims
// extra names (claims_head) if the save may be made, else saveLua's reply;
// save_write makes it, with the journal entries from ARGV[first] on,
// writes the head into the claims hash (with the fields and values of
// more, a list of nmore, if given: one write for both) and drops the
// head key of before. A script that has read the claims hash's
// head itself ({seq, id, journal_len, expiry}, as claims_head returns it)
// and has just taken the lease with the save's fence passes that head as
// held: save_check then reads neither again. One that has found none of
// the thread's keys exists (a start's first save) passes fresh: it reads
// nothing.
//
// The thread's expiry is kept beside the head (headExp, unix ms), as the
// saves that refresh it set it, so that a save learns it with the head
// instead of asking the history's PTTL; a thread without it (saved by an
// earlier version) asks once, and its next save writes it. The journal,
// history and claims share that expiry: saves alone set it (a claim
// gives the claims hash one only when it has none, before the thread's
// first save).
const saveCheckpointLua = `
local function save_check(KEYS, ARGV, extra, held, fresh)
  local h, vals = held, nil
  if fresh then
    -- The caller found none of the thread's keys (the claims hash, the
    -- head key, the journal, the history): a new thread, whose claims
    -- are all unset.
    if ARGV[1] ~= '1' or ARGV[2] ~= '0' then return 0 end
    vals = {}
    if extra then
      for i = 1, #extra do vals[i] = false end
    end
    return 1, -2, false, false, vals
  end
  if not held then
    if ARGV[8] ~= '' and redis.call('GET', KEYS[5]) ~= ARGV[8] then return -1 end
    -- The claims hash's head (claims_head's read, written out: a
    -- function defined costs every call of the script)
    if extra and #extra > 0 then
      h = redis.call('HMGET', KEYS[4], '` + headSeq + `', '` + headID + `', '` + headLen + `', '` + headExp + `', unpack(extra))
      vals = {}
      for i = 1, #extra do vals[i] = h[4 + i] end
    else
      h = redis.call('HMGET', KEYS[4], '` + headSeq + `', '` + headID + `', '` + headLen + `', '` + headExp + `')
    end
  end
  local moved = false
  if not h[1] then
    -- No head in the claims hash: a new thread, none of whose other keys
    -- exist yet (one command tells, where the head key, the journal's
    -- length and the history's expiry would be three), or one whose head
    -- an earlier version kept in the head key.
    if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) == 0 then
      if ARGV[1] ~= '1' or ARGV[2] ~= '0' then return 0 end
      return 1, -2, false, false, vals
    end
    h = redis.call('HMGET', KEYS[1], 'seq', 'id', 'journal_len')
    moved = h[1] ~= false
  end
  -- Arithmetic converts each string once, where tonumber converts it
  -- twice, in a call of its own.
  if (h[1] or 0) + 1 ~= ARGV[1] + 0 then return 0 end
  if h[2] and h[2] ~= ARGV[10] then return 0 end
  -- The head's journal_len is the journal's length: only a save writes
  -- either, both in one script, and both keys share one expiry. Saves
  -- write it as the decimal integer they are given, as they give it
  -- here: the strings compare as the numbers do, without converting
  -- either (tonumber costs a few hundred instructions of Redis a call).
  if h[3] then
    if h[3] ~= ARGV[2] then return 0 end
  elseif redis.call('LLEN', KEYS[2]) ~= tonumber(ARGV[2]) then
    return 0
  end
  -- The head's expiry (unix ms) goes to save_write as the string it is:
  -- save_write compares it with the refresh time as a string.
  if h[4] and not moved then return 1, h[4], moved, true, vals end
  -- The history is written by saves alone: its expiry is the thread's
  -- (the claims hash may exist before the first save, by a claim).
  return 1, redis.call('PTTL', KEYS[3]), moved, false, vals
end

local function save_write(KEYS, ARGV, first, left, moved, kept, more, nmore)
  local journal, history, claims = KEYS[2], KEYS[3], KEYS[4]
  local batch = 1000
  for i = first, #ARGV, batch do
    redis.call('RPUSH', journal, unpack(ARGV, i, math.min(i + batch - 1, #ARGV)))
  end
  if moved then redis.call('DEL', KEYS[1]) end
  redis.call('LPUSH', history, ARGV[4])
  -- The caller says when the history is trimmed back to its cap (it may
  -- run a tenth over: readers read the cap's worth, and a trim per save
  -- is spared).
  if ARGV[5] ~= '' then redis.call('LTRIM', history, 0, ARGV[5]) end
  -- left is the head's expiry (unix ms, a string) when kept, else the
  -- thread's time to live in ms (-2: new thread, -1: no expiry). Both
  -- times are decimal integers written by this package: of one length,
  -- the strings compare as the numbers do, with no conversion (which
  -- costs Redis hundreds of instructions a value).
  local refresh, at
  if kept then
    refresh = #left < #ARGV[7] or (#left == #ARGV[7] and left < ARGV[7])
  elseif left < 0 then
    refresh = true
  else
    local now = tonumber(ARGV[11]) - tonumber(ARGV[6])
    refresh = now + left < tonumber(ARGV[7])
    if not refresh then at = string.format('%.0f', now + left) end
  end
  if kept and not refresh then
    if more then
      redis.call('HSET', claims, '` + headSeq + `', ARGV[1], '` + headLen + `', ARGV[3], '` + headID + `', ARGV[9], unpack(more, 1, nmore))
    else
      redis.call('HSET', claims, '` + headSeq + `', ARGV[1], '` + headLen + `', ARGV[3], '` + headID + `', ARGV[9])
    end
  elseif more then
    redis.call('HSET', claims, '` + headSeq + `', ARGV[1], '` + headLen + `', ARGV[3], '` + headID + `', ARGV[9],
      '` + headExp + `', at or ARGV[11], unpack(more, 1, nmore))
  else
    redis.call('HSET', claims, '` + headSeq + `', ARGV[1], '` + headLen + `', ARGV[3], '` + headID + `', ARGV[9],
      '` + headExp + `', at or ARGV[11])
  end
  if refresh then
    for i = 2, 4 do
      redis.call('PEXPIRE', KEYS[i], ARGV[6])
    end
  elseif ARGV[2] == '0' and #ARGV >= first then
    -- A journal this save creates gets the head's expiry, in ms from
    -- now by this save's clock (as the head's was set).
    if kept then left = left - (ARGV[11] - ARGV[6]) end
    redis.call('PEXPIRE', journal, string.format('%.0f', left))
  end
end
`

// saveHeadIDLua is head_id(KEYS[4], KEYS[1]) written out, for the save
// scripts, whose KEYS name the claims hash and the head key there: the
// head's checkpoint ID. They ask it on the way out of a save refused
// (is it their own first attempt?), and define no function for it.
const saveHeadIDLua = `(redis.call('HGET', KEYS[4], '` + headID + `') or redis.call('HGET', KEYS[1], 'id'))`

// headOfLua defines head_of(claims, head, extra), which returns {seq,
// id, journal_len, expiry} from the claims hash (claims_head), or the
// first three from the head key of a thread saved before the head moved
// there, and whether it came from that key; with extra, the values of
// those claims, whichever key the head came from. Scripts that use it
// define it after headLua (a function defined costs each call of the
// script that defines it, used or not).
const headOfLua = `
local function head_of(claims, head, extra)
  local h, vals = claims_head(claims, extra)
  if h[1] then return h, false, vals end
  h = redis.call('HMGET', head, 'seq', 'id', 'journal_len')
  return h, h[1] ~= false, vals
end
`

// loadTailLua reads the head checkpoint and the journal entries it covers
// that a reader that saw checkpoint id, with seq and a journal of from
// entries, has not seen.
//
//	KEYS: head, journal, history, claims
//	ARGV: id, seq, from
//
// It returns nil when the thread has no head; {} when the head is still
// that checkpoint; else {checkpoint JSON, {entries from "from" on}, from},
// or all entries and 0 when the journal is shorter than from.
const loadTailLua = headLua + headOfLua + `
local h = head_of(KEYS[4], KEYS[1])
if not h[3] then return false end
local n, from = tonumber(h[3]), tonumber(ARGV[3])
if h[2] == ARGV[1] and tonumber(h[1]) == tonumber(ARGV[2]) and n == from then return {} end
if from > n then from = 0 end
local cp = redis.call('LINDEX', KEYS[3], 0)
if n == from then return {cp, {}, from} end
return {cp, redis.call('LRANGE', KEYS[2], from, n - 1), from}
`

// journalLua reads the first n journal entries.
//
//	KEYS: head, journal, claims
//	ARGV: n
//
// It returns nil when the thread has no head (an empty journal is not a
// missing thread), else the entries.
const journalLua = `
if redis.call('HEXISTS', KEYS[3], '` + headSeq + `') == 0 and redis.call('EXISTS', KEYS[1]) == 0 then return false end
local n = tonumber(ARGV[1])
if n <= 0 then return {} end
return redis.call('LRANGE', KEYS[2], 0, n - 1)
`

// claimLua sets a claim once.
//
//	KEYS: claims, head
//	ARGV: claim key, value, expiry in milliseconds
//
// It returns {1} when this call set the claim, else {0, the stored value}.
// A new claim makes the claims hash live at least as long as the head: a
// hash without an expiry gets the head's (or the minimum, if longer); one
// with an expiry has it already, since a save that extends the head's
// extends the claims' to the same.
const claimLua = `
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return {0, redis.call('HGET', KEYS[1], ARGV[1])}
end
if redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[3]), redis.call('PTTL', KEYS[2])))
end
return {1}
`

// renewLeaseLua extends a lease if the acquisition it names still holds
// it.
//
//	KEYS: lease
//	ARGV: lease token, expiry in milliseconds
const renewLeaseLua = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`

// releaseLeaseLua deletes a lease if the acquisition it names still
// holds it.
//
//	KEYS: lease
//	ARGV: lease token
const releaseLeaseLua = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`
