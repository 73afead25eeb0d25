package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The intake keeps a request from before it is acknowledged until its
// conversation is under way: a record per request, the token of the
// attempt that holds it, and an index of when each must be looked at
// again if nobody has said it started. All keys share the hash tag
// {intake}, so one script writes them together on a cluster too.
//
// A request is handled by one attempt at a time: the attempt that
// accepted it holds it, and its time in the index is the hold's expiry,
// which the holder renews while the request waits for a free slot or
// runs. DueIntake gives a request whose hold lapsed (its holder died, or
// stalled past its lease) to a new attempt, with a new token; every step
// that has an effect — the record's "posting", its root, "started" — is
// written only while the step's token still holds the request, so an
// attempt that lost it cannot post a second root or start a second
// conversation.

// acceptLua records a request once, held by the call that records it,
// and schedules its re-drive.
//
//	KEYS: record, due index, the holder's token
//	ARGV: id, record, expiry in ms, due in unix ms, token
//
// It returns 1 if this call recorded it — or an earlier attempt of this
// same call, with the same token, whose answer was lost — and 0 if
// another call recorded it already.
const acceptLua = `
if redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) == false then
  if redis.call('GET', KEYS[3]) == ARGV[5] then return 1 end
  return 0
end
redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
return 1
`

// unacceptLua takes back a request that acceptLua recorded, if token
// still holds it: its record, its token and its time in the index go.
//
//	KEYS: record, due index, the holder's token
//	ARGV: id, token
const unacceptLua = `
if redis.call('GET', KEYS[3]) ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
`

// dueIntakeLua lists up to n requests whose time has come. It takes
// none: takeIntakeLua takes each one, if it is still due then.
//
//	KEYS: due index
//	ARGV: now in unix ms, n
const dueIntakeLua = `
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
`

// takeIntakeLua gives a request listed by dueIntakeLua to a new attempt,
// held by token until "until", and returns its record — if it is still
// due at now: between the listing and the taking, its holder may have
// renewed its hold or let go of it (its time moved on), the start's
// carrier may have taken it (TakeIntake), or another DueIntake may have
// taken it. Checking and taking in one step is what gives a request to
// one attempt at a time: a token written without it would take the
// request from under an attempt that holds it. A request whose record
// has expired, or that started (its record is then empty: startedLua),
// leaves the index and false is returned; so is false for one no longer
// due.
//
//	KEYS: record, due index, the holder's token
//	ARGV: id, token, now in unix ms, until in unix ms
const takeIntakeLua = `
local due = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not due or tonumber(due) > tonumber(ARGV[3]) then return false end
local rec = redis.call('GET', KEYS[1])
if rec == false or rec == '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return false
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('SET', KEYS[3], ARGV[2], 'PX', ttl)
else
  redis.call('SET', KEYS[3], ARGV[2])
end
redis.call('ZADD', KEYS[2], 'XX', ARGV[4], ARGV[1])
return rec
`

// takeLetGoLua gives a request that was let go (letGoLua), and that no
// DueIntake has taken since, to a new attempt, held by token until
// "until", and returns its record. A request that an attempt holds, or
// that DueIntake is taking, is marked instead, so that its holder goes on
// with it rather than letting go; a started or expired one is left. (A
// let-go request's token is "-" and the time it was let go until, which
// DueIntake's take changes with the token: two attempts never take it at
// once.)
//
//	KEYS: record, due index, the holder's token, the go-on mark
//	ARGV: id, token, until in unix ms
//
// It returns the record, 1 if it marked the request, or 0.
const takeLetGoLua = `
local rec = redis.call('GET', KEYS[1])
local due = redis.call('ZSCORE', KEYS[2], ARGV[1])
if rec == false or rec == '' or not due then return 0 end
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then ttl = 3600000 end
if redis.call('GET', KEYS[3]) ~= '-' .. due then
  redis.call('SET', KEYS[4], '1', 'PX', ttl)
  return 1
end
redis.call('SET', KEYS[3], ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[2], 'XX', ARGV[3], ARGV[1])
return rec
`

// letGoLua lets go of a request that token holds: its record is
// replaced (keeping its expiry), its time moved to "due", and nobody
// holds it until then. A request marked to go on (takeLetGoLua) is kept
// by token instead, the mark dropped, and its hold renewed until "until":
// the holder goes on at once, and its hold may have been about to lapse
// (it was taken long ago, or the holder stalled), which would give the
// request to DueIntake as well.
//
//	KEYS: record, due index, the holder's token, the go-on mark
//	ARGV: id, record, token, due in unix ms, until in unix ms
//
// It returns 1 if it let go, 2 if token is to go on, 0 if token does not
// hold the request.
const letGoLua = `
if redis.call('GET', KEYS[3]) ~= ARGV[3] or not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
if redis.call('DEL', KEYS[4]) == 1 then
  redis.call('ZADD', KEYS[2], 'XX', ARGV[5], ARGV[1])
  return 2
end
redis.call('SET', KEYS[1], ARGV[2], 'XX', 'KEEPTTL')
redis.call('ZADD', KEYS[2], 'XX', ARGV[4], ARGV[1])
redis.call('SET', KEYS[3], '-' .. redis.call('ZSCORE', KEYS[2], ARGV[1]), 'KEEPTTL')
return 1
`

// holdIntakeLua renews the holds of several requests: each one still
// held by its token and not started has its time moved to "until".
//
//	KEYS: due index, then the holder's token key of each request
//	ARGV: until in unix ms, then the id and token of each request
//
// It returns, for each request in order, 1 if the token still holds it
// and it is not started, else 0.
const holdIntakeLua = `
local out = {}
for i = 2, #KEYS do
  local id, tok = ARGV[2*i-2], ARGV[2*i-1]
  if redis.call('GET', KEYS[i]) == tok and redis.call('ZSCORE', KEYS[1], id) then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[1], id)
    out[#out+1] = 1
  else
    out[#out+1] = 0
  end
end
return out
`

// updateIntakeLua replaces a request's record (keeping its expiry) and
// renews its hold, if token still holds it.
//
//	KEYS: record, due index, the holder's token
//	ARGV: id, record, token, until in unix ms
const updateIntakeLua = `
if redis.call('GET', KEYS[3]) ~= ARGV[3] or not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'XX', 'KEEPTTL')
redis.call('ZADD', KEYS[2], 'XX', ARGV[4], ARGV[1])
return 1
`

// startedLua takes a request out of the index if token holds it, and
// keeps of it only what recognises a repeat: the record's key, emptied,
// with its expiry. The token is dropped: nothing holds a started request.
//
//	KEYS: due index, the holder's token, record
//	ARGV: id, token
const startedLua = `
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[3], '', 'XX', 'KEEPTTL')
redis.call('DEL', KEYS[2])
return redis.call('ZREM', KEYS[1], ARGV[1])
`

// The scripts of the intake's holds.
var (
	takeIntakeScript   = redis.NewScript(takeIntakeLua)
	takeLetGoScript    = redis.NewScript(takeLetGoLua)
	letGoScript        = redis.NewScript(letGoLua)
	holdIntakeScript   = redis.NewScript(holdIntakeLua)
	updateIntakeScript = redis.NewScript(updateIntakeLua)
	startedScript      = redis.NewScript(startedLua)
	unacceptScript     = redis.NewScript(unacceptLua)
)

func (s *Store) intakeKeys(id string) (record, due string) {
	base := s.prefix + ":{intake}:"
	return base + "req:" + escape(id), base + "due"
}

// intakeToken is the key of the token of the attempt that holds id.
func (s *Store) intakeToken(id string) string {
	return s.prefix + ":{intake}:tok:" + escape(id)
}

// Accept records a request under id before it is acknowledged, held by
// the attempt whose token is token until due: unless that attempt renews
// its hold (HoldIntake) or says it started (Started), DueIntake gives the
// request to another attempt at due. It reports false, writing nothing,
// if id was recorded already: a repeated delivery. The record is kept for
// ttl. A retry of this call by the client, after a cut answer, still
// reports true. One round trip.
//
// Being stored is what lets Slack be told the request was received, so
// with Options.Replicas the record is acknowledged by replicas as a
// claim is: a master that fails over to a replica that never got it
// would take the request with it, and the attempt holding it would find
// it gone and stop (another attempt has it, as far as it can tell), the
// request acknowledged and never carried on. When the replicas do not
// acknowledge it in time, Accept takes the record back (if it still
// holds it) and fails with ErrNotReplicated: the person is told to try
// again, and their retry, or Slack's, is not taken for a repeat. (Should
// the master die with the record on a replica and the taking back not,
// the request is carried on once its hold lapses.)
func (s *Store) Accept(ctx context.Context, id, token string, record []byte, due time.Time, ttl time.Duration) (bool, error) {
	rec, idx := s.intakeKeys(id)
	keys := []string{rec, idx, s.intakeToken(id)}
	n, err := s.runScript(ctx, s.acceptScript, acceptLua, keys, id, record, ttl.Milliseconds(), due.UnixMilli(), token).Int()
	if errors.Is(err, ErrNotReplicated) {
		if uerr := unacceptScript.Run(ctx, s.rdb, keys, id, token).Err(); uerr != nil {
			err = fmt.Errorf("%w (and taking it back: %v)", err, uerr)
		}
	}
	if err != nil {
		return false, fmt.Errorf("accept %s: %w", id, err)
	}
	return n == 1, nil
}

// The intake's later steps — a hold renewed, a record updated, a request
// taken, let go of, handed on or said to be started — are written as
// Accept's record is: with Options.Replicas, each is sent with a WAIT in
// the same round trip (runScript), and fails with ErrNotReplicated
// unless enough replicas acknowledged it. A step made on the master
// alone could be lost to a failover, leaving the new master with the
// request as it was before the step: held by an attempt that let go of
// it, due again after a reply was handed on (a second answer), or let go
// of by the attempt now carrying it. So the caller goes on only with a
// step the replicas have; one they did not acknowledge is an error, and
// the request stays due (its hold lapses, and the intake takes it up
// again, on whichever master holds it then). Without Options.Replicas
// nothing is waited for, at no extra round trip.

// UpdateIntake replaces the record of an accepted request (keeping its
// expiry), e.g. once its root message is posted, and renews the hold
// until "until" — only if token still holds the request and it has not
// started. It reports whether it did: false means another attempt has
// the request, and this one must stop. With Options.Replicas, an update
// the replicas did not acknowledge fails with ErrNotReplicated.
func (s *Store) UpdateIntake(ctx context.Context, id, token string, record []byte, until time.Time) (bool, error) {
	rec, idx := s.intakeKeys(id)
	n, err := s.runScript(ctx, updateIntakeScript, updateIntakeLua, []string{rec, idx, s.intakeToken(id)}, id, record, token, until.UnixMilli()).Int()
	if err != nil {
		return false, fmt.Errorf("update intake %s: %w", id, err)
	}
	return n == 1, nil
}

// HoldIntake renews, until "until", the hold of each request of holds (id
// to token) that its token still holds and that has not started, and
// returns the ids it renewed. One round trip per 500 requests. With
// Options.Replicas, renewals the replicas did not acknowledge fail with
// ErrNotReplicated (the ids renewed on the master are still returned):
// a hold only the master has may lapse on a replica that takes over.
func (s *Store) HoldIntake(ctx context.Context, holds map[string]string, until time.Time) (map[string]bool, error) {
	_, idx := s.intakeKeys("")
	held := make(map[string]bool, len(holds))
	ids := make([]string, 0, len(holds))
	for id := range holds {
		ids = append(ids, id)
	}
	for len(ids) > 0 {
		batch := ids[:min(len(ids), 500)]
		ids = ids[len(batch):]
		keys := []string{idx}
		args := []any{until.UnixMilli()}
		for _, id := range batch {
			keys = append(keys, s.intakeToken(id))
			args = append(args, id, holds[id])
		}
		cmd := s.runScript(ctx, holdIntakeScript, holdIntakeLua, keys, args...)
		res, err := cmd.Int64Slice()
		if errors.Is(err, ErrNotReplicated) {
			// The script ran: its reply says what the master holds.
			if items, ok := cmd.Val().([]any); ok {
				res = make([]int64, len(items))
				for i, v := range items {
					res[i], _ = v.(int64)
				}
			}
		}
		for i, id := range batch {
			if i < len(res) && res[i] == 1 {
				held[id] = true
			}
		}
		if err != nil {
			return held, fmt.Errorf("hold intake: %w", err)
		}
	}
	return held, nil
}

// Started says the request's conversation is under way, if token holds
// it: it is no longer driven again. Its record's key stays, emptied, until
// it expires, so repeats of it are still recognised; the token goes.
// With Options.Replicas, a Started the replicas did not acknowledge fails
// with ErrNotReplicated; sent again, it writes nothing more on the master
// that has it and waits for the replicas to have it (replicas.go), and on
// a new master that never had it, it is made there if token still holds
// the request.
func (s *Store) Started(ctx context.Context, id, token string) error {
	rec, idx := s.intakeKeys(id)
	if err := s.runScript(ctx, startedScript, startedLua, []string{idx, s.intakeToken(id), rec}, id, token).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("intake %s started: %w", id, err)
	}
	return nil
}

// DueIntake takes up to n accepted requests whose time has come — whose
// holder neither renewed its hold nor said they started — and returns
// their records by id, each now held by token until "until". Several
// processes may call it at once; each request goes to one of them, and
// one that its holder renewed or let go of, or that TakeIntake took,
// after it was listed is not taken: each request is checked and taken in
// one step. A request whose record has expired is dropped. One round
// trip, and one per request taken. With Options.Replicas, a take the
// replicas did not acknowledge ends the call with ErrNotReplicated, and
// the requests taken before it are returned: that request is held on the
// master by a token nobody uses, and taken again once its hold lapses.
func (s *Store) DueIntake(ctx context.Context, token string, now, until time.Time, n int) (map[string][]byte, error) {
	_, idx := s.intakeKeys("")
	ids, err := s.dueIntakeScript.Run(ctx, s.rdb, []string{idx}, now.UnixMilli(), n).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("due intake: %w", err)
	}
	out := make(map[string][]byte, len(ids))
	for _, id := range ids {
		rec, _ := s.intakeKeys(id)
		raw, err := s.runScript(ctx, takeIntakeScript, takeIntakeLua, []string{rec, idx, s.intakeToken(id)}, id, token, now.UnixMilli(), until.UnixMilli()).Text()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("intake %s: %w", id, err)
		}
		out[id] = []byte(raw)
	}
	return out, nil
}

// intakeMark is the key of the mark that says request id's holder is
// to go on with it rather than let go (LetGoIntake).
func (s *Store) intakeMark(id string) string {
	return s.prefix + ":{intake}:go:" + escape(id)
}

// LetGoIntake lets go of request id, which token holds: its record is
// replaced (keeping its expiry) and nobody holds it until due, when
// DueIntake gives it to a new attempt, unless TakeIntake does first; it
// reports let. If TakeIntake asked for the request meanwhile, token
// keeps it, its hold renewed until "until", and is to go on with it now:
// goOn. Neither: token does not hold the request, and nothing changed.
// One round trip. With Options.Replicas, a let-go the replicas did not
// acknowledge fails with ErrNotReplicated: the attempt neither goes on
// nor counts on it, and the request is taken up again when it is due on
// whichever master has it — let go of (at due, or by TakeIntake) or
// still held by token (when that hold lapses).
func (s *Store) LetGoIntake(ctx context.Context, id, token string, record []byte, due, until time.Time) (let, goOn bool, err error) {
	rec, idx := s.intakeKeys(id)
	n, err := s.runScript(ctx, letGoScript, letGoLua, []string{rec, idx, s.intakeToken(id), s.intakeMark(id)}, id, record, token, due.UnixMilli(), until.UnixMilli()).Int()
	if err != nil {
		return false, false, fmt.Errorf("let go of intake %s: %w", id, err)
	}
	return n == 1, n == 2, nil
}

// TakeIntake gives request id, let go of (LetGoIntake) and not started,
// to a new attempt whose token is token, held until "until", and returns
// its record. A request that an attempt still holds is not taken: its
// holder goes on with it instead of letting go. It returns nil if it
// took nothing. One round trip. With Options.Replicas, a take the
// replicas did not acknowledge fails with ErrNotReplicated, and the
// request is not to be handed on: on the master it is held by token
// until "until", and the intake takes it up once that lapses; a master
// that took over without the take has it let go of, as before, and the
// intake takes it up when it is due.
func (s *Store) TakeIntake(ctx context.Context, id, token string, until time.Time) ([]byte, error) {
	rec, idx := s.intakeKeys(id)
	v, err := s.runScript(ctx, takeLetGoScript, takeLetGoLua, []string{rec, idx, s.intakeToken(id), s.intakeMark(id)}, id, token, until.UnixMilli()).Result()
	if err != nil {
		return nil, fmt.Errorf("take intake %s: %w", id, err)
	}
	if raw, ok := v.(string); ok {
		return []byte(raw), nil
	}
	return nil, nil
}

// PendingIntake counts accepted requests not yet started.
func (s *Store) PendingIntake(ctx context.Context) (int, error) {
	_, idx := s.intakeKeys("")
	n, err := s.rdb.ZCard(ctx, idx).Result()
	if err != nil {
		return 0, fmt.Errorf("count intake: %w", err)
	}
	return int(n), nil
}
