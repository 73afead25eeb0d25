package handlers

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackui"
)

// Streamed answers. While the model writes an answer, the thread shows it
// growing in one message:
//
//   - With Slack's streaming methods (chat.startStream, chat.appendStream,
//     chat.stopStream) where the workspace has them. The first answer
//     tries them; if Slack refuses, this process uses the fallback from
//     then on.
//   - Else the message is posted with chat.postMessage and redrawn with
//     chat.update.
//
// Either way the message changes at most once per StreamOptions.Interval
// (the text that arrived meanwhile is shown when the interval is up),
// and the final answer is shown at once: the runner's Answer event
// finishes the streamed message with the final text instead of posting
// the answer again, escaped for the format it goes in
// (slackui.ShownAnswer, slackui.FinalAnswer).
//
// Each streamed message is recorded in the store (its channel, ts and the
// text shown so far), so that a message left half-written by a process
// that died is found by whichever process carries the run on: when the
// answer streams again, the new message's record replaces the old one in
// the command that reads it, and the old message is finished with a note
// ("… (interrupted; the answer continues below)"); when the answer was
// complete (the process died after saving it, before showing it), the
// old message gets the final text — again on a repeated delivery, as a
// finished message is not recorded again (the runner records with the
// session's end that the answer was shown). A run that fails mid-stream
// finishes its message with the same note. A reply that asks for tool
// calls keeps the text it streamed.
//
// In an assistant thread (a direct message with the app) the bot also
// shows "is thinking…" while the model works, through
// assistant.threads.setStatus; a failure there is ignored.

// StreamOptions configure how answers are shown while they are written.
type StreamOptions struct {
	// Interval is the least time between two changes of a growing
	// answer (default 1s). Slack rate-limits message updates.
	Interval time.Duration
	// UpdateOnly: do not try Slack's streaming methods; post the answer
	// and update it.
	UpdateOnly bool
}

// SetStreaming sets how answers are shown while they are written. Call
// it before the Reporter is used.
func (r *Reporter) SetStreaming(o StreamOptions) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	r.streams.opts, r.streams.on = o, true
	if o.UpdateOnly {
		r.streams.noNative.Store(true)
	}
}

// thinkingStatus is the assistant thread's status while the model works.
const thinkingStatus = "is thinking…"

// streams are the answers this process is streaming. Safe for concurrent
// use.
type streams struct {
	opts     StreamOptions
	on       bool        // answers stream (SetStreaming)
	noNative atomic.Bool // Slack refused chat.startStream

	mu   sync.Mutex
	live map[string]*liveAnswer // by record key
}

// native reports whether answers stream with Slack's streaming methods.
func (s *streams) native() bool { return s.on && !s.noNative.Load() }

// get returns the live answer under key, creating it if need be.
func (s *streams) get(key string) *liveAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		s.live = map[string]*liveAnswer{}
	}
	la := s.live[key]
	if la == nil {
		la = &liveAnswer{key: key}
		s.live[key] = la
	}
	return la
}

// take removes and returns the live answer under key, or nil.
func (s *streams) take(key string) *liveAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	la := s.live[key]
	delete(s.live, key)
	return la
}

// takeThread removes and returns the live answers of a thread.
func (s *streams) takeThread(thread string) []*liveAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*liveAnswer
	prefix := streamKey(thread, 0)
	prefix = prefix[:strings.LastIndexByte(prefix, '#')+1]
	for k, la := range s.live {
		if strings.HasPrefix(k, prefix) {
			out = append(out, la)
			delete(s.live, k)
		}
	}
	return out
}

// streamRecord is what the store keeps of a streamed message. Its JSON
// names differ from a button reference's, so that a button value naming
// a record decodes to an empty reference.
type streamRecord struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
	Native  bool   `json:"native,omitempty"`
	// Shown is the text the message shows, as sent: Markdown while the
	// message streams (Native), mrkdwn once posted or updated.
	Shown string `json:"shown"`
	// Done: the message is finished; Final is the hash of the answer it
	// was finished with ("" when it was cut off).
	Done  bool   `json:"done,omitempty"`
	Final string `json:"final,omitempty"`
}

// liveAnswer is one answer being streamed by this process.
type liveAnswer struct {
	key string

	mu      sync.Mutex
	rec     streamRecord
	started bool // the message exists (or could not be posted: broken)
	broken  bool
	want    string // the text to show next
	last    time.Time
	timer   *time.Timer
	closed  bool
}

// streamKey is the store key of the record of message m of a thread.
func streamKey(thread string, m int) string {
	return "answer-stream:" + thread + "#" + strconv.Itoa(m)
}

func answerHash(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:8])
}

// thinking shows "is thinking…" in an assistant thread.
func (r *Reporter) thinking(ctx context.Context, channel, root string) {
	if !strings.HasPrefix(channel, "D") {
		return
	}
	err := r.api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{
		ChannelID: channel, ThreadTS: root, Status: thinkingStatus,
	})
	if err != nil {
		r.log.WithError(err).Debug("assistant thread status not set")
	}
}

// answerDelta shows the growing text of an answer.
func (r *Reporter) answerDelta(ctx context.Context, e runner.Event, team, channel, root string) error {
	la := r.streams.get(streamKey(e.Thread, e.Message))
	la.mu.Lock()
	defer la.mu.Unlock()
	if la.closed || la.broken {
		return nil
	}
	if !la.started {
		return r.startAnswer(ctx, la, e, team, channel, root)
	}
	la.want = e.Text
	wait := r.streams.opts.Interval - r.now().Sub(la.last)
	if wait <= 0 {
		return r.flush(ctx, la)
	}
	if la.timer == nil {
		bg := context.WithoutCancel(ctx)
		la.timer = time.AfterFunc(wait, func() {
			la.mu.Lock()
			defer la.mu.Unlock()
			la.timer = nil
			if !la.closed {
				_ = r.flush(bg, la)
			}
		})
	}
	return nil
}

// startAnswer posts the message an answer grows in, then finishes one an
// earlier process left half-written; la.mu is held.
func (r *Reporter) startAnswer(ctx context.Context, la *liveAnswer, e runner.Event, team, channel, root string) error {
	la.started = true
	rec := streamRecord{Channel: channel}
	if !r.streams.noNative.Load() {
		shown := slackui.ShownAnswer(true, e.Text)
		requester := ""
		if e.State != nil {
			requester = cmp.Or(e.State.TurnBy, e.State.Requester)
		}
		_, ts, err := r.api.StartStreamContext(ctx, channel, slack.MsgOptionTS(root),
			slack.MsgOptionMarkdownText(shown), slack.MsgOptionRecipientTeamID(team), slack.MsgOptionRecipientUserID(requester))
		var slackErr slack.SlackErrorResponse
		switch {
		case err == nil && ts != "":
			rec.TS, rec.Native, rec.Shown = ts, true, shown
		case err == nil:
			// No message to append to or stop: the answer is posted
			// below, and updated; streams are not tried again.
			r.streams.noNative.Store(true)
			r.log.Warn("chat.startStream answered without a ts; answers stream with chat.update")
		case errors.As(err, &slackErr) && isGone(err):
			// This channel refuses the bot (removed, archived): not a
			// reason to stop streaming elsewhere.
		case errors.As(err, &slackErr):
			// The workspace (or the app's scopes) has no streaming
			// messages: post and update from now on.
			r.streams.noNative.Store(true)
			r.log.WithField("error", slackErr.Err).Info("Slack refused chat.startStream; answers stream with chat.update")
		default:
			r.log.WithError(err).Debug("chat.startStream failed; this answer streams with chat.update")
		}
	}
	if rec.TS == "" {
		shown := slackui.ShownAnswer(false, e.Text)
		_, ts, err := r.api.PostMessageContext(ctx, channel, slack.MsgOptionTS(root), slack.MsgOptionText(shown, false))
		if err != nil {
			la.broken = true
			return err
		}
		rec.TS, rec.Shown = ts, shown
	}
	la.rec, la.want, la.last = rec, e.Text, r.now()
	if old, ok := r.saveRecord(ctx, la.key, la.rec); ok && !old.Done {
		r.finishInterrupted(ctx, "", old)
	}
	return nil
}

// flush shows la.want if it is not shown yet; la.mu is held. A failure
// is left for the next change (or the final answer) to catch up.
func (r *Reporter) flush(ctx context.Context, la *liveAnswer) error {
	shown := slackui.ShownAnswer(la.rec.Native, la.want)
	if shown == la.rec.Shown {
		return nil
	}
	var err error
	switch {
	case la.rec.Native && strings.HasPrefix(shown, la.rec.Shown):
		_, _, err = r.api.AppendStreamContext(ctx, la.rec.Channel, la.rec.TS, slack.MsgOptionMarkdownText(shown[len(la.rec.Shown):]))
	case la.rec.Native:
		// The text started over (a retried model call): a stream only
		// grows, so end it and redraw the message.
		_, _, _ = r.api.StopStreamContext(ctx, la.rec.Channel, la.rec.TS)
		la.rec.Native = false
		shown = slackui.ShownAnswer(false, la.want)
		fallthrough
	default:
		_, _, _, err = r.api.UpdateMessageContext(ctx, la.rec.Channel, la.rec.TS, slack.MsgOptionText(shown, false))
	}
	la.last = r.now()
	if err != nil {
		r.log.WithError(err).Debug("streamed answer not updated")
		return err
	}
	la.rec.Shown = shown
	r.saveRecord(ctx, la.key, la.rec)
	return nil
}

// finish gives a streamed message its final text; la.mu is held.
func (r *Reporter) finish(ctx context.Context, la *liveAnswer, final string, hash string) error {
	la.closed = true
	if la.timer != nil {
		la.timer.Stop()
		la.timer = nil
	}
	err := r.retry(ctx, func() error {
		if la.rec.Native {
			shown := slackui.FinalAnswer(true, final)
			rest, grows := strings.CutPrefix(shown, la.rec.Shown)
			var opts []slack.MsgOption
			if grows && rest != "" {
				opts = append(opts, slack.MsgOptionMarkdownText(rest))
			}
			_, _, err := r.api.StopStreamContext(ctx, la.rec.Channel, la.rec.TS, opts...)
			if err == nil && grows {
				la.rec.Shown = shown
				return nil
			}
			// The stream ended already (Slack ends idle streams) or
			// shows other text: redraw the message, as mrkdwn.
			la.rec.Native = false
		}
		shown := slackui.FinalAnswer(false, final)
		_, _, _, err := r.api.UpdateMessageContext(ctx, la.rec.Channel, la.rec.TS, slack.MsgOptionText(shown, false))
		if err == nil {
			la.rec.Shown = shown
		}
		return err
	})
	if err != nil {
		return err
	}
	la.rec.Done, la.rec.Final = true, hash
	return nil
}

// answer shows a saved answer: it finishes the message the answer
// streamed in, if there is one, or posts it.
func (r *Reporter) answer(ctx context.Context, e runner.Event, channel, root string) error {
	key := streamKey(e.Thread, e.Message)
	hash := answerHash(e.Text)
	if la := r.streams.take(key); la != nil {
		la.mu.Lock()
		defer la.mu.Unlock()
		if la.started && !la.broken && !la.closed {
			return r.finishOrPost(ctx, la, e, hash, channel, root)
		}
	}
	if rec, ok := r.loadRecord(ctx, key); ok {
		switch {
		case rec.Done && rec.Final == hash:
			// Shown already: a delivery repeated after a crash.
			return nil
		case !rec.Done:
			// Streamed by a process that died before it showed the
			// saved answer.
			la := &liveAnswer{key: key, rec: rec, started: true}
			return r.finishOrPost(ctx, la, e, hash, channel, root)
		}
	}
	_, err := r.post(ctx, channel, slack.MsgOptionTS(root), slack.MsgOptionText(slackui.FinalAnswer(false, e.Text), false))
	return err
}

// finishOrPost finishes the streamed message with the answer; if Slack
// refuses (the message is gone or can no longer be changed), the answer
// is posted as a message of its own, so that it is shown all the same.
func (r *Reporter) finishOrPost(ctx context.Context, la *liveAnswer, e runner.Event, hash, channel, root string) error {
	err := r.finish(ctx, la, e.Text, hash)
	var refused slack.SlackErrorResponse
	if !errors.As(err, &refused) {
		return err
	}
	r.log.WithField("error", refused.Err).Warn("the streamed answer could not be finished; posting it")
	if _, err := r.post(ctx, channel, slack.MsgOptionTS(root), slack.MsgOptionText(slackui.FinalAnswer(false, e.Text), false)); err != nil {
		return err
	}
	la.rec.Done, la.rec.Final = true, hash
	r.saveRecord(ctx, la.key, la.rec)
	return nil
}

// streamEnded finishes the streamed text of a reply that asks for tool
// calls.
func (r *Reporter) streamEnded(ctx context.Context, e runner.Event) error {
	la := r.streams.take(streamKey(e.Thread, e.Message))
	if la == nil {
		return nil
	}
	la.mu.Lock()
	defer la.mu.Unlock()
	if !la.started || la.broken || la.closed {
		return nil
	}
	return r.finish(ctx, la, e.Text, answerHash(e.Text))
}

// interruptStreams finishes with a note the answers of a thread that
// were cut off by a failed run.
func (r *Reporter) interruptStreams(ctx context.Context, thread string) {
	for _, la := range r.streams.takeThread(thread) {
		la.mu.Lock()
		if la.started && !la.broken && !la.closed {
			la.closed = true
			if la.timer != nil {
				la.timer.Stop()
			}
			r.finishInterrupted(ctx, la.key, la.rec)
		}
		la.mu.Unlock()
	}
}

// finishInterrupted ends a cut-off message with the interrupted note and
// records it as done under key, unless key is "" (another record
// replaced it).
func (r *Reporter) finishInterrupted(ctx context.Context, key string, rec streamRecord) {
	log := r.log.WithFields(logrus.Fields{"channel": rec.Channel, "ts": rec.TS})
	done := false
	note := slackui.NoteAfter(rec.Shown)
	if rec.Native {
		_, _, err := r.api.StopStreamContext(ctx, rec.Channel, rec.TS, slack.MsgOptionMarkdownText(note))
		done = err == nil
	}
	if !done {
		// A stream's Markdown is escaped for mrkdwn too (slackui), so
		// what it showed can be sent again as text.
		_, _, _, err := r.api.UpdateMessageContext(ctx, rec.Channel, rec.TS, slack.MsgOptionText(rec.Shown+note, false))
		if err != nil {
			log.WithError(err).Warn("finishing an interrupted answer")
			return
		}
	}
	rec.Shown, rec.Done, rec.Native = rec.Shown+note, true, false
	if key != "" {
		r.saveRecord(ctx, key, rec)
	}
	log.Info("finished an answer cut off mid-stream")
}

func (r *Reporter) loadRecord(ctx context.Context, key string) (streamRecord, bool) {
	raw, _, _ := r.store.Ref(ctx, key)
	return decodeRecord(raw)
}

func decodeRecord(raw []byte) (streamRecord, bool) {
	var rec streamRecord
	if json.Unmarshal(raw, &rec) != nil || rec.TS == "" {
		return streamRecord{}, false
	}
	return rec, true
}

// saveRecord records rec under key and returns the record it replaced,
// if any: one command.
func (r *Reporter) saveRecord(ctx context.Context, key string, rec streamRecord) (streamRecord, bool) {
	raw, _ := json.Marshal(rec)
	old, _, err := r.store.SwapRef(ctx, key, raw, refTTL)
	if err != nil {
		r.log.WithError(err).Warn("recording a streamed answer")
	}
	return decodeRecord(old)
}
