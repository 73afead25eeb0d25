package handlers

import (
	"context"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// A running call's progress, as its tool reports it (an MCP server's
// progress notifications), is shown on the call's card: the card as it
// was drawn when the call started, and a line under it. The card is
// updated at most once per ProgressEvery, with the latest progress; once
// the call finishes, progress changes nothing, so it never hides the
// outcome. Only the process running the call hears of its progress, and
// it is the one that drew the running card.

// ProgressEvery is how often a card may be updated for its call's
// progress.
var ProgressEvery = time.Second

// runningCard is the card of a call that runs in this process.
type runningCard struct {
	mu      sync.Mutex
	channel string
	ts      string
	text    string
	blocks  []slack.Block
	done    bool
	line    string    // the latest progress, not yet shown
	sent    time.Time // when progress was last shown
	pending bool      // an update is scheduled
}

// runningCards are the cards of the calls running in this process, by
// thread and call.
type runningCards struct{ m sync.Map }

func runningKey(thread, call string) string { return thread + "\x00" + call }

// started remembers a call's running card.
func (rc *runningCards) started(thread, call string, card *runningCard) {
	if old, had := rc.m.Swap(runningKey(thread, call), card); had {
		old.(*runningCard).finish()
	}
}

// finished forgets a call's running card; an update for its progress
// being sent ends first.
func (rc *runningCards) finished(thread, call string) {
	if card, had := rc.m.LoadAndDelete(runningKey(thread, call)); had {
		card.(*runningCard).finish()
	}
}

func (rc *runningCards) get(thread, call string) *runningCard {
	card, _ := rc.m.Load(runningKey(thread, call))
	c, _ := card.(*runningCard)
	return c
}

func (c *runningCard) finish() {
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
}

// CallProgress shows a running call's progress on its card (it is an
// mcp.ProgressReporter). progress and total are the tool's numbers (total
// 0: unknown); message is its words, if any.
func (r *Reporter) CallProgress(ctx context.Context, call tools.CallInfo, progress, total float64, message string) {
	card := r.running.get(call.Thread, call.Call)
	if card == nil {
		return
	}
	line := slackui.ProgressLine(progress, total, message)
	card.mu.Lock()
	defer card.mu.Unlock()
	if card.done {
		return
	}
	card.line = line
	if card.pending {
		return
	}
	card.pending = true
	wait := time.Until(card.sent.Add(ProgressEvery))
	bg := context.WithoutCancel(ctx)
	time.AfterFunc(max(wait, 0), func() { r.showProgress(bg, card) })
}

// showProgress updates the card with its latest progress, unless the call
// finished meanwhile. The card's lock is held during the update, so the
// finished card is drawn after it.
func (r *Reporter) showProgress(ctx context.Context, card *runningCard) {
	card.mu.Lock()
	defer card.mu.Unlock()
	card.pending = false
	if card.done {
		return
	}
	card.sent = time.Now()
	blocks := append(append([]slack.Block{}, card.blocks...), slackui.ContextBlock(card.line))
	if err := r.update(ctx, card.channel, card.ts, slack.MsgOptionText(card.text, false), slack.MsgOptionBlocks(blocks...)); err != nil {
		r.log.WithError(err).Warn("showing a call's progress on its card")
	}
}
