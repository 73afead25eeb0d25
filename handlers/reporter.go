package handlers

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackdir"
	"github.com/countersign/countersign/slackprogress"
	"github.com/countersign/countersign/slackretry"
	"github.com/countersign/countersign/slackui"
)

// ref is what a button's opaque value stands for.
type ref struct {
	Thread string `json:"thread"`
	// Call and Attempt name a card's call and its decision round; both
	// are empty on a run's error card.
	Call    string `json:"call,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// Hash is the arguments' hash the card showed: a click decides those
	// arguments or nothing.
	Hash string `json:"hash,omitempty"`
}

// Reporter posts a conversation's progress into its Slack thread. It is
// the runner.Reporter of the Slack front end.
type Reporter struct {
	api   *slack.Client
	store Store
	now   func() time.Time
	log   logrus.FieldLogger
	tools slackui.ToolLookup // optional; see WithTools
	// groups, if set, finds the members of user groups that get cards by
	// direct message; see WithGroups.
	groups *slackdir.Groups
	// streams are the answers being streamed (see stream.go).
	streams streams
	// home, if set, publishes Home tabs again when the inbox changes.
	home atomic.Pointer[Home]
	// rounds keeps the records of recent cards (see roundRecords).
	rounds roundCache
	// posting are the cards being posted and recorded here: a decision
	// that comes before its card is recorded (a click as soon as Slack
	// shows the card) waits for the record, so that the card shows it.
	posting postingCards
	// running are the calls running here, whose progress it shows: as
	// a task in a streamed message where answers stream with Slack's
	// streaming methods, else as a line under the call's card.
	running *slackprogress.Calls
	// goneSeen are the conversations logged as in a channel that
	// refuses the bot (removed.go).
	goneSeen goneThreads
	// botID is the bot's own bot ID (auth.test), which tells its cards
	// from other apps' messages (lostcard.go); see WithBotID.
	botID string
}

// WithBotID tells the reporter the bot's ID (auth.test's bot_id): with
// it, a card posted and not recorded (its process died in between) is
// found in its thread and taken up, rather than left beside a second
// one with its buttons live.
func (r *Reporter) WithBotID(id string) *Reporter {
	r.botID = id
	return r
}

// Progress shows the progress of the calls running here (it is an
// mcp.ProgressReporter).
func (r *Reporter) Progress() *slackprogress.Calls { return r.running }

// WithHome makes the reporter keep the Home tabs of those who opened
// them up to date (Server.Home; nil: the tab is off).
func (r *Reporter) WithHome(h *Home) *Reporter {
	r.home.Store(h)
	return r
}

// NewReporter returns a Reporter posting through api.
func NewReporter(api *slack.Client, store Store, now func() time.Time, log logrus.FieldLogger) *Reporter {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		l := logrus.New()
		l.Out = io.Discard
		log = l
	}
	r := &Reporter{api: api, store: store, now: now, log: log}
	r.streams.opts.Interval = time.Second
	r.running = slackprogress.New(api, r.streams.native, log)
	return r
}

// refTTL is how long a card's buttons stay usable beyond the call's
// expiry (a late click is answered "no longer pending" either way).
const refTTL = 30 * 24 * time.Hour

// report shows e in its thread (Report).
func (r *Reporter) report(ctx context.Context, e runner.Event) error {
	team, channel, root, err := slackui.ParseThread(e.Thread)
	if err != nil {
		return err
	}
	requester := ""
	if e.State != nil {
		requester = e.State.Requester
		if e.Call != nil {
			requester = e.Call.AskedBy(e.State)
		}
	}
	switch e.Kind {
	case runner.Answer:
		return r.answer(ctx, e, channel, root)
	case runner.Thinking:
		r.thinking(ctx, channel, root)
		return nil
	case runner.AnswerDelta:
		return r.answerDelta(ctx, e, team, channel, root)
	case runner.StreamEnded:
		return r.streamEnded(ctx, e)
	case runner.ApprovalNeeded:
		c := *e.Call
		defer r.posting.start(e.Thread, cardKey(c.Key, c.Attempts))()
		// The Home tab shows the card's buttons with the same value.
		value, err := newCardRef(ctx, r.store, e.Thread, c)
		if err != nil {
			return err
		}
		blocks := slackui.WithToolBlock(slackui.PendingCard(c, requester, value, r.now(), e.Gate, true), r.tools, c.Tool)
		key := cardKey(c.Key, c.Attempts)
		var ts string
		if e.Again {
			// Shown before, maybe: a card posted and not recorded is
			// taken up (lostcard.go), and redrawn below.
			found, ferr := r.findCards(ctx, channel, root, key)
			if ferr != nil {
				r.log.WithField("thread", e.Thread).WithError(ferr).Warn("looking for a card that was not recorded; posting it")
			}
			ts = found[key]
		}
		adopted := ts != ""
		if !adopted {
			ts, err = r.post(ctx, channel, slack.MsgOptionTS(root),
				slack.MsgOptionText(slackui.PendingText(c, e.Gate), false), slack.MsgOptionBlocks(blocks...), cardMeta(key))
		}
		gone, isGone := slackui.ChannelGone(err)
		if err != nil && (!isGone || c.Status == agent.Unknown) {
			return err // an outcome-unknown card is settled only in its thread (Report)
		}
		// A card the channel refuses is recorded with no ts (see
		// cardless): its copies are posted and kept in step all the
		// same, and the requester is told by direct message.
		ikey := runner.CopiesKey(c.Key, c.Attempts)
		rec := map[string][]byte{cardKey(c.Key, c.Attempts): []byte(ts)}
		if e.Copies == nil {
			rec[ikey] = []byte{} // no copies: their empty index goes with the card
		}
		if rec, err = r.recordCard(ctx, e.Thread, rec); err != nil {
			return err
		}
		if won := rec[cardKey(c.Key, c.Attempts)]; ts != "" && !cardless(won) && string(won) != ts {
			// The card was posted by another process too (or before a
			// crash), and that one is recorded: this one would never
			// be redrawn, and would keep its buttons once the call is
			// decided. Remove it, and show the approvals it showed on
			// that one.
			r.removeCard(ctx, e.Thread, channel, ts)
			if !e.Gate.HasNews(c) {
				// Nothing the card that stays does not show: a
				// card as first posted (which may be older than
				// what that card shows now).
				return nil
			}
			return r.redrawPending(ctx, e, channel, requester) // its count
		}
		if adopted {
			r.log.WithFields(logrus.Fields{"thread": e.Thread, "call": c.Key, "ts": ts}).Info("took up a card that was posted and not recorded")
			if e.Gate.HasNews(c) {
				// Approvals, or an edit's reset, since it was posted.
				// Else it shows the round as it is: this event's state
				// may be older than what it shows by now.
				if err := r.update(ctx, channel, ts, slack.MsgOptionText(slackui.PendingText(c, e.Gate), false), slack.MsgOptionBlocks(blocks...)); err != nil {
					return err
				}
			}
		}
		if e.Copies == nil || r.postCopies(ctx, e, channel, root, c, requester, blocks, rec) {
			r.rounds.put(e.Thread, c.Key, c.Attempts, rec)
		}
		if isGone {
			return r.cantShow(ctx, e, channel, gone)
		}
		return nil
	case runner.ApprovalProgress:
		return r.updatePending(ctx, e, channel, requester)
	case runner.CallDecided:
		return r.updateCard(ctx, e.Thread, channel, *e.Call, e.Call.Attempts, requester)
	case runner.CallStarted:
		return r.updateCard(ctx, e.Thread, channel, *e.Call, e.Call.Attempts-1, requester)
	case runner.CallFinished:
		c := *e.Call
		r.running.Finished(ctx, e.Thread, c.Key, c.Status != agent.Done && c.Status != agent.Asking)
		if err := r.updateCard(ctx, e.Thread, channel, c, c.Attempts-1, requester); err != nil {
			return err
		}
		if c.Status == agent.Asking || c.Status == agent.Failed && c.NeedsApproval {
			return nil // its card says why (or what it waits for), once
		}
		_, err := r.post(ctx, channel, slack.MsgOptionTS(root), slack.MsgOptionText(slackui.ResultText(c), false))
		return err
	case runner.RunFailed:
		r.interruptStreams(ctx, e.Thread)
		if e.Final {
			// No Retry: it would fail the same way.
			_, err := r.post(ctx, channel, slack.MsgOptionTS(root),
				slack.MsgOptionText(slackui.TextRunFailed, false), slack.MsgOptionBlocks(slackui.FinalErrorCard(e.Text)...))
			return err
		}
		value, err := putRef(ctx, r.store, ref{Thread: e.Thread})
		if err != nil {
			return err
		}
		_, err = r.post(ctx, channel, slack.MsgOptionTS(root),
			slack.MsgOptionText(slackui.TextRunFailed, false), slack.MsgOptionBlocks(slackui.ErrorCard(e.Text, value)...))
		return err
	case runner.GraphChanged:
		return r.postGraphChanged(ctx, e, channel, root)
	case runner.RunCancelled:
		_, err := r.post(ctx, channel, slack.MsgOptionTS(root), slack.MsgOptionText(slackui.CancelledText(e.People), false))
		return err
	case runner.Reminder, runner.Escalated:
		text := slackui.ReminderText(e.Call.Tool, e.People, e.Waited)
		if e.Kind == runner.Escalated {
			text = slackui.EscalationText(e.Call.Tool, e.People, e.Waited)
		}
		_, err := r.post(ctx, channel, slack.MsgOptionTS(root), slack.MsgOptionText(text, false))
		return err
	case runner.InboxChanged:
		if h := r.home.Load(); h != nil {
			h.Changed(ctx, e.Inbox)
		}
	}
	return nil
}

// updateCard redraws the card of c's decision round attempt, if it has
// one (calls that needed no approval have none).
func (r *Reporter) updateCard(ctx context.Context, thread, channel string, c agent.Call, attempt int, requester string) error {
	r.posting.wait(ctx, thread, cardKey(c.Key, attempt))
	cards, err := r.roundRecords(ctx, thread, c.Key, attempt)
	if err != nil {
		return err
	}
	ts, ok := cards[cardKey(c.Key, attempt)]
	first := attempt
	for !ok && c.NeedsApproval && attempt > 0 && (c.Status == agent.Running || c.Status == agent.Asking || c.Status.Settled()) {
		// An attempt that follows a pause for input (or a connection)
		// has no card of its own: the approval's card shows it.
		attempt--
		if cards, err = r.roundRecords(ctx, thread, c.Key, attempt); err != nil {
			return err
		}
		ts, ok = cards[cardKey(c.Key, attempt)]
	}
	if !ok && c.NeedsApproval {
		// Its card may be in the thread, unrecorded (lostcard.go).
		if rec, a := r.adoptCard(ctx, thread, channel, c, first, attempt); rec != nil {
			cards, attempt = rec, a
			ts, ok = cards[cardKey(c.Key, attempt)]
		}
	}
	if !ok {
		if c.Status == agent.Running {
			r.running.Started(slackprogress.Call{Thread: thread, Key: c.Key, Tool: c.Tool, Requester: requester})
		}
		return nil
	}
	blocks := slackui.SettledCard(c, requester, r.now())
	if cardless(ts) {
		if c.Status == agent.Running {
			r.running.Started(slackprogress.Call{Thread: thread, Key: c.Key, Tool: c.Tool, Requester: requester})
		}
		r.updateCopies(ctx, thread, channel, c, attempt, blocks, cards)
		return nil
	}
	err = r.update(ctx, channel, string(ts), slack.MsgOptionText(slackui.CardText(c), false), slack.MsgOptionBlocks(blocks...))
	if c.Status == agent.Running && err == nil {
		r.running.Started(slackprogress.Call{Thread: thread, Key: c.Key, Tool: c.Tool, Requester: requester,
			CardTS: string(ts), CardText: slackui.CardText(c), CardBlocks: blocks})
	}
	r.updateCopies(ctx, thread, channel, c, attempt, blocks, cards)
	return err
}

// updatePending redraws the card of a call that still waits, with its
// approvals so far (and, after an edit, its new arguments and buttons
// that decide them).
func (r *Reporter) updatePending(ctx context.Context, e runner.Event, channel, requester string) error {
	r.posting.wait(ctx, e.Thread, cardKey(e.Call.Key, e.Call.Attempts))
	return r.redrawPending(ctx, e, channel, requester)
}

// redrawPending is updatePending once the card is posted and recorded.
func (r *Reporter) redrawPending(ctx context.Context, e runner.Event, channel, requester string) error {
	c := *e.Call
	cards, err := r.roundRecords(ctx, e.Thread, c.Key, c.Attempts)
	if err != nil {
		return err
	}
	ts, ok := cards[cardKey(c.Key, c.Attempts)]
	if !ok {
		// Its card may be in the thread, unrecorded (lostcard.go).
		if cards, _ = r.adoptCard(ctx, e.Thread, channel, c, c.Attempts, c.Attempts); cards == nil {
			return nil
		}
		ts = cards[cardKey(c.Key, c.Attempts)]
	}
	value, err := putRef(ctx, r.store, ref{Thread: e.Thread, Call: c.Key, Attempt: c.Attempts, Hash: c.RunHash()})
	if err != nil {
		return err
	}
	blocks := slackui.WithToolBlock(slackui.PendingCard(c, requester, value, r.now(), e.Gate, false), r.tools, c.Tool)
	if !cardless(ts) {
		err = r.update(ctx, channel, string(ts), slack.MsgOptionText(slackui.CardText(c), false), slack.MsgOptionBlocks(blocks...))
	}
	r.updateCopies(ctx, e.Thread, channel, c, c.Attempts, blocks, cards)
	return err
}

// post posts a message and returns its ts.
func (r *Reporter) post(ctx context.Context, channel string, opts ...slack.MsgOption) (string, error) {
	return slackretry.Post(ctx, r.api, channel, opts...)
}

// update changes a message.
func (r *Reporter) update(ctx context.Context, channel, ts string, opts ...slack.MsgOption) error {
	return slackretry.Update(ctx, r.api, channel, ts, opts...)
}

// removeCard deletes a card this process posted whose round's card is
// another message.
func (r *Reporter) removeCard(ctx context.Context, thread, channel, ts string) {
	log := r.log.WithField("thread", thread)
	err := r.retry(ctx, func() error {
		_, _, err := r.api.DeleteMessageContext(ctx, channel, ts)
		return err
	})
	if err != nil {
		log.WithError(err).Warn("removing a second card of a call")
		return
	}
	log.Info("removed a second card of a call: its card was posted already")
}

// retry calls fn again while Slack answers 429 (slackretry.Do).
func (r *Reporter) retry(ctx context.Context, fn func() error) error { return slackretry.Do(ctx, fn) }

// recordCardFor is how long recordCard keeps trying: longer than a
// Redis Cluster takes to promote a dead master's replica.
const recordCardFor = 30 * time.Second

// recordCard records rec, the ts of a card just posted and what goes
// with it, trying again while the store does not answer (a failover of
// the thread's master): a card whose ts is lost is never redrawn, and
// keeps its buttons after its call is decided and run. It keeps trying
// when the run that posted the card stops (its lease lapsed during the
// failover): the card is in the thread either way, and where it is must
// be known to whoever decides it. The records are set once, so a try
// whose answer was lost and the one after it agree; it returns them as
// stored.
func (r *Reporter) recordCard(ctx context.Context, thread string, rec map[string][]byte) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordCardFor)
	defer cancel()
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		stored, err := r.store.ClaimAll(ctx, thread, rec)
		if err == nil {
			return stored, nil
		}
		r.log.WithField("thread", thread).WithError(err).Warn("recording a card; trying again")
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
	}
}

// putRef stores rf under a fresh random reference, for refTTL.
func putRef(ctx context.Context, store Store, rf ref) (string, error) {
	value := rand.Text()
	raw, _ := json.Marshal(rf)
	if err := store.PutRef(ctx, value, raw, refTTL); err != nil {
		return "", fmt.Errorf("store card reference: %w", err)
	}
	return value, nil
}

func cardKey(call string, attempt int) string { return fmt.Sprintf("card:%s#%d", call, attempt) }

// roundRecords returns the records that redrawing the card of call's
// decision round attempt reads: the card's ts, the link to the thread and
// the index of the card's copies — a few keys, however long the thread.
// They are set once, so once the card and its index are recorded this
// process keeps them and reads them no more.
func (r *Reporter) roundRecords(ctx context.Context, thread, call string, attempt int) (map[string][]byte, error) {
	if rec, ok := r.rounds.get(thread, call, attempt); ok {
		return rec, nil
	}
	rec, err := r.store.ClaimValues(ctx, thread, []string{cardKey(call, attempt), permalinkKey, runner.CopiesKey(call, attempt)})
	if err != nil {
		return nil, err
	}
	_, card := rec[cardKey(call, attempt)]
	if _, indexed := rec[runner.CopiesKey(call, attempt)]; card && indexed {
		r.rounds.put(thread, call, attempt, rec)
	}
	return rec, nil
}

// roundCache keeps the set-once records of recent cards' decision rounds
// (see roundRecords): a value once recorded never changes, so every
// replica may keep it. It holds at most maxRounds rounds and is safe for
// concurrent use.
type roundCache struct {
	mu sync.Mutex
	m  map[string]map[string][]byte
}

const maxRounds = 4096

func roundCacheKey(thread, call string, attempt int) string {
	return thread + "\x00" + call + "#" + strconv.Itoa(attempt)
}

func (c *roundCache) get(thread, call string, attempt int) (map[string][]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, ok := c.m[roundCacheKey(thread, call, attempt)]
	return rec, ok
}

func (c *roundCache) put(thread, call string, attempt int, rec map[string][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxRounds {
		c.m = map[string]map[string][]byte{} // the oldest rounds are long settled
	}
	c.m[roundCacheKey(thread, call, attempt)] = rec
}

// WithTools makes the reporter name, on approval cards, the MCP server and
// tool behind a call, with the tool's description and annotations.
func (r *Reporter) WithTools(box slackui.ToolLookup) *Reporter {
	r.tools = box
	return r
}

// postGraphChanged posts the card of a runner.GraphChanged event.
func (r *Reporter) postGraphChanged(ctx context.Context, e runner.Event, channel, root string) error {
	value, err := putRef(ctx, r.store, ref{Thread: e.Thread})
	if err != nil {
		return err
	}
	_, err = r.post(ctx, channel, slack.MsgOptionTS(root),
		slack.MsgOptionText(slackui.TextGraphChanged, false),
		slack.MsgOptionBlocks(slackui.GraphChangedCard(e.Text, value)...))
	return err
}

// postingCards are the cards being posted and recorded by this process,
// by thread and card key.
type postingCards struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// start marks a card as being posted; the function it returns marks it
// posted and recorded (or failed).
func (p *postingCards) start(thread, key string) (done func()) {
	k := thread + "\x00" + key
	ch := make(chan struct{})
	p.mu.Lock()
	if p.m == nil {
		p.m = map[string]chan struct{}{}
	}
	p.m[k] = ch
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		if p.m[k] == ch {
			delete(p.m, k)
		}
		p.mu.Unlock()
		close(ch)
	}
}

// wait returns once the card is no longer being posted here, or ctx
// ends.
func (p *postingCards) wait(ctx context.Context, thread, key string) {
	p.mu.Lock()
	ch := p.m[thread+"\x00"+key]
	p.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}
