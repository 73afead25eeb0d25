//go:build chaos

package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/slacksim/slacktest"
)

var failoverRuns = flag.Int("failover.n", 12, "how many conversations TestFailoverChaos runs, each with a failover of its thread's master")

var failoverMoments = flag.String("failover.moments", "", "the moments TestFailoverChaos fails over at, separated by commas (default all): "+strings.Join(allMoments, ", "))

// allMoments are the moments TestFailoverChaos fails a master over at.
var allMoments = []string{"close", "intake", "claim", "request", "lagging claim", "lagging running save", "lagging inbox"}

// TestFailoverChaos is the fault-injection driver of the failover tests,
// built only with the chaos tag, off `make test` (it takes about half a
// minute a conversation):
//
//	make chaos                     # 12 conversations
//	make chaos FAILOVER_RUNS=60
//
// Each conversation starts a Redis Cluster of three masters with a
// replica each and two bot processes, and fails the master of its
// thread over at one moment — a close, a reply's intake, a claim — by
// CLUSTER FAILOVER or by killing it, in turn. Four more moments have the
// replica lag first, so that the master acknowledges writes no replica
// has — an /agent's intake, a claim, the save of an approved call as
// running, a waiting call's inbox entry (the last two with
// REDIS_WAIT_REPLICAS set: the killed master comes back as the new
// master's replica) — and then either kill the master, its
// replica taking over without them (lag/kill), or let the replica catch
// up (lag/catch up). -failover.moments (make chaos FAILOVER_MOMENTS=…)
// picks some moments only. At the end it prints how many conversations
// had a call run or an answer posted twice (duplicate), an acknowledged
// request or an approved call never carried on (lost), or did not finish
// (stuck).
func TestFailoverChaos(t *testing.T) {
	type tally struct{ runs, failed, duplicate, lost, stuck int }
	var mu sync.Mutex
	byMoment := map[string]*tally{}
	moments := allMoments
	if *failoverMoments != "" {
		moments = nil
		for _, m := range strings.Split(*failoverMoments, ",") {
			if m = strings.TrimSpace(m); !slices.Contains(allMoments, m) {
				t.Fatalf("-failover.moments: no moment %q; the moments are: %s", m, strings.Join(allMoments, ", "))
			}
			moments = append(moments, m)
		}
	}
	hows := func(m string) [2]string {
		if m == "request" || strings.HasPrefix(m, "lagging ") {
			return [2]string{"lag/catch up", "lag/kill"}
		}
		return [2]string{"CLUSTER FAILOVER", "kill"}
	}
	for i := range *failoverRuns {
		moment, kill := moments[i%len(moments)], (i/len(moments))%2 == 1
		how := hows(moment)[0]
		if kill {
			how = hows(moment)[1]
		}
		name := fmt.Sprintf("%02d %s/%s", i, moment, how)
		mu.Lock()
		if byMoment[moment+"/"+how] == nil {
			byMoment[moment+"/"+how] = &tally{}
		}
		tl := byMoment[moment+"/"+how]
		tl.runs++
		mu.Unlock()
		observe := func(h *harness, root slacktest.Call) {
			mu.Lock()
			defer mu.Unlock()
			answer, calls := "Deployed.", h.target.Count("POST /deploy")
			switch moment {
			case "intake":
				answer, calls = "About 2.1 million people.", h.asked(theQuestion)
			case "request":
				answer, calls = capitalAnswer, h.asked(capitalQuestion)
			}
			answers := h.answers(root, answer)
			switch {
			case calls > 1 || answers > 1:
				tl.duplicate++
			case calls == 0:
				tl.lost++
			case answers == 0:
				tl.stuck++
			}
		}
		ok := t.Run(name, func(t *testing.T) {
			switch moment {
			case "close":
				failoverDuringAClose(t, kill, observe)
			case "intake":
				failoverDuringAReplysIntake(t, kill, i, observe)
			case "claim":
				failoverDuringAClaim(t, kill, observe)
			case "request":
				failoverLosesNoAcknowledgedRequest(t, kill, observe)
			case "lagging claim":
				failoverOfAClaimNoReplicaHas(t, kill, observe)
			case "lagging running save":
				failoverOfARunningSaveNoReplicaHas(t, kill, observe)
			case "lagging inbox":
				failoverKeepsAWaitingCallInTheInbox(t, kill, observe)
			}
		})
		if !ok {
			mu.Lock()
			tl.failed++
			mu.Unlock()
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-30s %5s %7s %9s %5s %6s\n", "moment/failover", "runs", "failed", "duplicate", "lost", "stuck")
	var sum tally
	for _, m := range moments {
		for _, how := range hows(m) {
			tl := byMoment[m+"/"+how]
			if tl == nil {
				continue
			}
			fmt.Fprintf(&b, "%-30s %5d %7d %9d %5d %6d\n", m+"/"+how, tl.runs, tl.failed, tl.duplicate, tl.lost, tl.stuck)
			sum.runs += tl.runs
			sum.failed += tl.failed
			sum.duplicate += tl.duplicate
			sum.lost += tl.lost
			sum.stuck += tl.stuck
		}
	}
	fmt.Fprintf(&b, "%-30s %5d %7d %9d %5d %6d\n", "all", sum.runs, sum.failed, sum.duplicate, sum.lost, sum.stuck)
	t.Logf("failovers, one per conversation:\n%s", b.String())
	fmt.Print(b.String())
}
