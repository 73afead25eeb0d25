// Package slackprogress shows in Slack how far the tool calls running in
// this process got, as their tools report it (an MCP server's progress
// notifications):
//
//   - Where the thread's answers stream with Slack's streaming methods, a
//     call that reports progress gets a streamed message of its own in
//     the thread, with the call as a task (a task_update chunk): in
//     progress while it runs, its details the latest progress, then
//     complete or error when it ends, and the stream stopped.
//   - Elsewhere — streaming off, or refused by Slack — the call's card
//     (if it has one) gets a line under it: the card as drawn when the
//     call started, and the latest progress.
//
// Either way Slack hears of progress at most once per Every, with the
// latest; once the call finishes, progress changes nothing, so it never
// hides the outcome. Only the process running a call hears of its
// progress, and it is the one that drew the running card.
//
// The package does not decide what a card shows (slackui) nor when a
// call runs (the runner): package handlers tells it when calls start and
// end.
package slackprogress

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/slackretry"
	"github.com/countersign/countersign/slackui"
	"github.com/countersign/countersign/tools"
)

// Every is how often Slack may hear of a call's progress.
var Every = time.Second

// Call is a call that started running in this process.
type Call struct {
	// Thread and Key name the call; Tool is its tool's name.
	Thread, Key, Tool string
	// Requester is who asked for it: a streamed message in a channel is
	// addressed to them.
	Requester string
	// CardTS is the ts of the call's card ("" if it has none), CardText
	// and CardBlocks the card as drawn when the call started.
	CardTS     string
	CardText   string
	CardBlocks []slack.Block
}

// Calls are the calls running in this process. Safe for concurrent use.
type Calls struct {
	api *slack.Client
	log logrus.FieldLogger
	// tasks reports whether answers stream with Slack's streaming
	// methods now; refused is set once Slack refused a task.
	tasks   func() bool
	refused atomic.Bool
	m       sync.Map // by thread and call: *running
}

// New returns the running calls of a process that talks to Slack
// through api. tasks reports whether the thread's answers stream with
// Slack's streaming methods (nil: they never do). Once Slack refuses a
// task, progress shows on cards in this process from then on.
func New(api *slack.Client, tasks func() bool, log logrus.FieldLogger) *Calls {
	if tasks == nil {
		tasks = func() bool { return false }
	}
	if log == nil {
		l := logrus.New()
		l.Out = io.Discard
		log = l
	}
	return &Calls{api: api, tasks: tasks, log: log}
}

// running is a call running here, and how its progress is shown.
type running struct {
	Call
	team, channel, root string

	mu       sync.Mutex
	done     bool
	line     string    // the latest progress, not yet shown
	sent     time.Time // when progress was last shown
	pending  bool      // a showing is scheduled
	streamTS string    // the task's streamed message, once started
	noTask   bool      // the task could not be streamed: the card shows progress
}

func key(thread, call string) string { return thread + "\x00" + call }

// Started remembers a call that started running. A call of a thread
// that is not a Slack one is ignored.
func (c *Calls) Started(call Call) {
	team, channel, root, err := slackui.ParseThread(call.Thread)
	if err != nil {
		return
	}
	r := &running{Call: call, team: team, channel: channel, root: root}
	if old, had := c.m.Swap(key(call.Thread, call.Key), r); had {
		c.end(context.Background(), old.(*running), false)
	}
}

// Finished forgets a call that ended (failed: with an error), and
// finishes its task; progress being shown is shown first.
func (c *Calls) Finished(ctx context.Context, thread, call string, failed bool) {
	if r, had := c.m.LoadAndDelete(key(thread, call)); had {
		c.end(ctx, r.(*running), failed)
	}
}

func (c *Calls) end(ctx context.Context, r *running, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	if r.streamTS == "" {
		return
	}
	status := slackui.TaskComplete
	if failed {
		status = slackui.TaskError
	}
	err := slackretry.Do(ctx, func() error {
		_, _, err := c.api.StopStreamContext(ctx, r.channel, r.streamTS,
			slack.MsgOptionChunks(slackui.CallTask(r.Key, r.Tool, status, r.line)))
		return err
	})
	if err != nil {
		c.log.WithError(err).Warn("finishing a call's task")
	}
}

// CallProgress shows a running call's progress (it is an
// mcp.ProgressReporter). progress and total are the tool's numbers
// (total 0: unknown); message is its words, if any.
func (c *Calls) CallProgress(ctx context.Context, call tools.CallInfo, progress, total float64, message string) {
	v, ok := c.m.Load(key(call.Thread, call.Call))
	if !ok {
		return
	}
	r := v.(*running)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.line = slackui.ProgressLine(progress, total, message)
	if r.pending {
		return
	}
	r.pending = true
	bg := context.WithoutCancel(ctx)
	time.AfterFunc(max(time.Until(r.sent.Add(Every)), 0), func() { c.show(bg, r) })
}

// show shows a call's latest progress, unless it finished meanwhile. The
// lock is held while Slack is told, so that the end is shown after it.
func (c *Calls) show(ctx context.Context, r *running) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = false
	if r.done {
		return
	}
	r.sent = time.Now()
	if !r.noTask && (r.streamTS != "" || c.tasks() && !c.refused.Load()) && c.showTask(ctx, r) {
		return
	}
	r.noTask = true
	if r.CardTS == "" {
		return
	}
	blocks := append(append([]slack.Block{}, r.CardBlocks...), slackui.ContextBlock(r.line))
	if err := slackretry.Update(ctx, c.api, r.channel, r.CardTS, slack.MsgOptionText(r.CardText, false), slack.MsgOptionBlocks(blocks...)); err != nil {
		c.log.WithError(err).Warn("showing a call's progress on its card")
	}
}

// showTask streams the call's task, in a message of its own started on
// its first progress, and reports whether it did.
func (c *Calls) showTask(ctx context.Context, r *running) bool {
	task := slack.MsgOptionChunks(slackui.CallTask(r.Key, r.Tool, slackui.TaskInProgress, r.line))
	if r.streamTS != "" {
		err := slackretry.Do(ctx, func() error {
			_, _, err := c.api.AppendStreamContext(ctx, r.channel, r.streamTS, task)
			return err
		})
		if err != nil {
			// Slack ends idle streams: the next progress starts anew.
			c.log.WithError(err).Debug("a call's task not updated")
			r.streamTS = ""
		}
		return true
	}
	var ts string
	err := slackretry.Do(ctx, func() (err error) {
		_, ts, err = c.api.StartStreamContext(ctx, r.channel, slack.MsgOptionTS(r.root), task,
			slack.MsgOptionTaskDisplayMode(slack.TaskDisplayModeTimeline),
			slack.MsgOptionRecipientTeamID(r.team), slack.MsgOptionRecipientUserID(r.Requester))
		return err
	})
	var refused slack.SlackErrorResponse
	_, gone := slackui.ChannelGone(err)
	switch {
	case err == nil && ts != "":
		r.streamTS = ts
		return true
	case gone:
		// This channel refuses the bot (removed from it, archived): not
		// a reason to stop streaming tasks elsewhere. Its card cannot
		// show progress either.
		c.log.WithError(err).Debug("a call's task not streamed: the channel refuses the bot")
		r.CardTS = ""
	case err == nil || errors.As(err, &refused):
		c.refused.Store(true)
		c.log.Info("Slack refused a call's task in a streamed message; progress shows on cards")
	default:
		c.log.WithError(err).Debug("a call's task not streamed; its progress shows on its card")
	}
	return false
}
