package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/runner"
)

// Approvals of calls that need several: each set of approvals is a field
// of the thread's claims hash, beside the decision it leads to, so that
// one script adds an approval and, with the last one required, claims
// the decision — of any number of concurrent approvals exactly one
// decides.

var _ runner.Store = (*Store)(nil)

// approveScript is approveLua, shared by every Store.
var approveScript = redis.NewScript(approveLua)

// Approve implements runner.Approvals: it records a.By's approval in the
// set a.Set and claims a.Key when the set holds a.Required approvals, in
// one atomic step.
func (s *Store) Approve(ctx context.Context, thread string, a runner.Approval) (runner.Approved, error) {
	got, err := s.ClaimApproval(ctx, runner.ApprovalClaim{Thread: thread, Approval: a})
	return got.Approved, err
}

// ClaimApproval implements runner.Sessions: Approve with the
// thread's wake-up written first and, when the approval is recorded, the
// lease taken (if asked and free); ErrStale, having written nothing, if
// the head is no longer checkpoint c.ExpectHead.
func (s *Store) ClaimApproval(ctx context.Context, c runner.ApprovalClaim) (runner.ApprovalClaimed, error) {
	if err := runner.CheckApproval(c.Approval); err != nil {
		return runner.ApprovalClaimed{}, fmt.Errorf("approve %s: %w", c.Key, err)
	}
	tk, err := s.keys(c.Thread)
	if err == nil {
		err = checkClaimKeys(c.Key, c.Set)
	}
	if err != nil {
		return runner.ApprovalClaimed{}, fmt.Errorf("approve %s: %w", c.Key, err)
	}
	keys := []string{tk.claims, tk.head, tk.lease, tk.fence}
	if !s.isCluster() {
		keys = append(keys, s.prefix+":wakeups")
	} else if !c.WakeBy.IsZero() {
		if err := s.WakeBy(ctx, c.Thread, c.WakeBy); err != nil {
			return runner.ApprovalClaimed{}, fmt.Errorf("approve %s: %w", c.Key, err)
		}
	}
	leaseMs, token := int64(0), ""
	if c.LeaseOwner != "" && c.LeaseTTL >= time.Millisecond {
		leaseMs, token = c.LeaseTTL.Milliseconds(), runner.NewLeaseToken(c.LeaseOwner)
	}
	args := make([]any, 0, 13+len(c.Keys))
	args = append(args, c.Key, c.Set, c.By, c.Entry, c.Required, c.Value, s.ttl.Milliseconds(), c.ExpectHead, c.Thread,
		unixMs(c.WakeBy), token, leaseMs, s.fenceTTL(c.LeaseTTL))
	for _, k := range c.Keys {
		args = append(args, k)
	}
	res, err := s.runScript(ctx, approveScript, approveLua, keys, args...).Slice()
	if err != nil {
		return runner.ApprovalClaimed{}, fmt.Errorf("approve %s in %s: %w", c.Key, c.Thread, err)
	}
	if len(res) > 0 && res[0] == int64(-1) {
		return runner.ApprovalClaimed{}, fmt.Errorf("approve %s in %s: %w", c.Key, c.Thread, runner.ErrStale)
	}
	if len(res) < 4 {
		return runner.ApprovalClaimed{}, fmt.Errorf("approve %s in %s: unexpected reply %v", c.Key, c.Thread, res)
	}
	var out runner.ApprovalClaimed
	status, _ := res[0].(int64)
	out.Recorded, out.Won = status == 1 || status == 3, status == 3
	if v, ok := res[1].(string); ok {
		out.Winner = []byte(v)
	}
	if v, ok := res[2].(string); ok && v != "" {
		out.Approvals = []byte(v)
	}
	if res[3] == int64(1) && len(res) == 7 {
		out.Leased, out.Token = true, token
		out.Head, _ = res[4].(string)
		out.Claims = claimValues(c.Keys, res[5])
		if err := s.leasedWakeBy(ctx, c.Thread, res[6], c.WakeBy); err != nil {
			return out, fmt.Errorf("approve %s in %s: %w", c.Key, c.Thread, err)
		}
	}
	return out, nil
}

// approveLua records an approval and claims the decision with the last
// one required.
//
//	KEYS: claims, head, lease, fence[, wakeups]
//	ARGV: decision claim key, approvals field, approver, entry, approvals
//	      required, decision, expiry ms, expected head ID or '', thread,
//	      wake-up (unix ms or ''), lease token or '', lease ms, fence ms,
//	      then the claim keys to read if the lease is taken
//
// The approvals field holds one line per approval: approver, a tab, the
// entry. It returns {-1} when the head is not the expected one (nothing
// written); else {status, the decision's claim or false, the approvals,
// 1 if it took the lease else 0[, the head's ID, {the claims' values},
// the acquisition's number (on a cluster; else nil)]},
// where status is 0 when the decision was claimed before (nothing
// recorded), 2 when the approver had approved already (nothing
// recorded), 1 when the approval was recorded, and 3 when it was also
// the last one required and claimed the decision: the decision, a
// newline and the approvals.
const approveLua = acquiredLua + headLua + `
if ARGV[8] ~= '' and head_id(KEYS[1], KEYS[2]) ~= ARGV[8] then return {-1} end
if KEYS[5] and ARGV[10] ~= '' then
  redis.call('ZADD', KEYS[5], 'LT', ARGV[10], ARGV[9])
end
local list = redis.call('HGET', KEYS[1], ARGV[2]) or ''
local claimed = redis.call('HGET', KEYS[1], ARGV[1])
if claimed then return {0, claimed, list, 0} end
if string.find('\n' .. list, '\n' .. ARGV[3] .. '\t', 1, true) then return {2, false, list, 0} end
list = list .. ARGV[3] .. '\t' .. ARGV[4] .. '\n'
redis.call('HSET', KEYS[1], ARGV[2], list)
local _, n = string.gsub(list, '\n', '')
local status, claim = 1, false
if n >= tonumber(ARGV[5]) then
  claim = ARGV[6] .. '\n' .. list
  redis.call('HSET', KEYS[1], ARGV[1], claim)
  status = 3
end
if redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[7]), redis.call('PTTL', KEYS[2])))
end
if ARGV[11] == '' or tonumber(ARGV[12]) <= 0 then return {status, claim, list, 0} end
if not redis.call('SET', KEYS[3], ARGV[11], 'NX', 'PX', ARGV[12]) then return {status, claim, list, 0} end
local seq = false
if not KEYS[5] then seq = acquired(KEYS[4], ARGV[13]) end
local vals = {}
if #ARGV >= 14 then vals = redis.call('HMGET', KEYS[1], unpack(ARGV, 14, #ARGV)) end
return {status, claim, list, 1, head_id(KEYS[1], KEYS[2]), vals, seq}
`
