package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Operations: what the bot's Redis traffic is for, so that its cost can
// be counted by purpose (metrics.RedisHook).
const (
	OpSave     = "save"     // a checkpoint written
	OpLoad     = "load"     // a checkpoint, its tail or its journal read
	OpClaim    = "claim"    // a decision, approval or claim written or read
	OpLease    = "lease"    // a thread opened, renewed, closed or released
	OpAudit    = "audit"    // the audit trail
	OpInbox    = "inbox"    // the Home tab's index of waiting calls
	OpIntake   = "intake"   // requests stored before their ack, dedup of deliveries
	OpSchedule = "schedule" // wake-ups, and the count of waiting calls
	OpOther    = "other"    // references, pings, WAIT, anything else
)

// Operations lists the Op constants.
var Operations = []string{OpSave, OpLoad, OpClaim, OpLease, OpAudit, OpInbox, OpIntake, OpSchedule, OpOther}

// Operation tells what a command a Store sent is for: one of the Op
// constants. It knows the store's scripts by their SHA-1 (EVALSHA) or
// source (EVAL), and other commands by their first key. It is safe for
// concurrent use, and for a go-redis hook.
func Operation(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return OpOther
	}
	name := strings.ToLower(argString(args[0]))
	switch name {
	case "evalsha", "evalsha_ro":
		if op, ok := scriptOps()[argString(args[1])]; ok {
			return op
		}
		return OpOther
	case "eval", "eval_ro":
		sum := sha1.Sum([]byte(argString(args[1])))
		if op, ok := scriptOps()[hex.EncodeToString(sum[:])]; ok {
			return op
		}
		return OpOther
	case "hvals":
		if strings.HasSuffix(argString(args[1]), ":{inbox}:calls") {
			return OpSchedule // WaitingTotal: the count of waiting calls
		}
	}
	return keyOperation(argString(args[1]))
}

// argString is a command's argument as a string: itself when it is one
// (names, keys, SHA-1s: no copy, as the hook runs for every command).
func argString(a any) string {
	if s, ok := a.(string); ok {
		return s
	}
	return fmt.Sprint(a)
}

// keyOperation tells what a plain command on key is for.
func keyOperation(key string) string {
	switch {
	case strings.Contains(key, ":{intake}:"), strings.Contains(key, ":dedup:"):
		return OpIntake
	case strings.HasSuffix(key, ":wakeups"), strings.HasSuffix(key, ":waiting"):
		return OpSchedule
	case strings.Contains(key, ":audit"):
		return OpAudit
	case strings.Contains(key, ":{inbox}:"):
		return OpInbox
	case strings.HasSuffix(key, "}:claims"):
		return OpClaim
	case strings.HasSuffix(key, "}:lease"):
		return OpLease
	case strings.HasSuffix(key, "}:head"), strings.HasSuffix(key, "}:journal"), strings.HasSuffix(key, "}:history"):
		return OpLoad
	}
	return OpOther
}

// scriptOps maps the SHA-1 of each of the store's scripts to what it is
// for.
var scriptOps = sync.OnceValue(func() map[string]string {
	ops := map[string]string{}
	for src, op := range map[string]string{
		saveLua: OpSave, saveAuditLua: OpSave, loadTailLua: OpLoad, journalLua: OpLoad,
		claimLua: OpClaim, claimDecisionLua: OpClaim, approveLua: OpClaim,
		acceptLua: OpIntake, dueIntakeLua: OpIntake, dedupLua: OpIntake,
		takeIntakeLua: OpIntake, holdIntakeLua: OpIntake, updateIntakeLua: OpIntake, startedLua: OpIntake,
		renewLeaseLua: OpLease, releaseLeaseLua: OpLease, openLua: OpLease, closeLua: OpLease, closeInboxLua: OpLease,
		acquireLua: OpLease, scheduleLua: OpSchedule,
		auditLua: OpAudit, updateInboxLua: OpInbox,
		claimAllLua: OpClaim, dedupRefLua: OpIntake, dedupClaimLua: OpIntake,
		saveCloseLua: OpSave, recordLua: OpClaim, moveWakeLua: OpSchedule,
		firstSaveLua: OpSave, firstSaveCloseLua: OpSave, keepReplyLua: OpClaim,
		claimSaveLua: OpClaim,
		unacceptLua:  OpIntake, syncedClaimsLua: OpClaim, auditSyncLua: OpAudit,
	} {
		sum := sha1.Sum([]byte(src))
		ops[hex.EncodeToString(sum[:])] = op
	}
	return ops
})
