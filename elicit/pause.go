package elicit

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slackretry"
	"github.com/countersign/countersign/slackui"
)

// Input requests of a paused run (the newest MCP protocol's "input
// required" result, see runner's input.go): the run is paused, nothing
// waits in memory, and the question is posted in the thread with the same
// message and form as a request made during a call. The request's record
// (Paused set) says which call, pause and request it answers; an answer,
// taken by any replica, goes to runner.Service.Answer, which owns the
// rules (only the person asked, before the expiry, the first answer) and
// resumes the run.

var (
	_ runner.Asker          = (*Elicitor)(nil)
	_ runner.QuestionCloser = (*Elicitor)(nil)
)

// PausedID is the ID of the request q: the same for every showing of one
// request of one pause, so a message posted again by a process that
// died before recording it leads to the same record.
func PausedID(q runner.Question) string {
	h := sha256.New()
	for _, part := range []string{q.Thread, q.Call, strconv.Itoa(q.Round), q.Request.Key} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "p" + hex.EncodeToString(h.Sum(nil)[:12])
}

// Ask posts q in its thread, to the person asked.
func (e *Elicitor) Ask(ctx context.Context, q runner.Question) error {
	_, channel, root, err := slackui.ParseThread(q.Thread)
	if err != nil {
		return err
	}
	id := PausedID(q)
	rec := Record{Thread: q.Thread, Requester: q.Of, Tool: q.Tool, Message: q.Request.Message, Schema: q.Request.Schema,
		Deadline: q.Expires, Call: q.Call, Attempt: q.Round, Paused: true, Input: q.Request.Key}
	if len(rec.Schema) == 0 {
		rec.Schema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	ttl := time.Until(q.Expires) + TTL
	if err := e.save(ctx, id, rec, "", ttl); err != nil {
		return err
	}
	blocks := slackui.ElicitMessage(rec.Requester, rec.Tool, rec.Message, rec.Deadline, id)
	ts, err := slackretry.Post(ctx, e.api, channel, slack.MsgOptionTS(root),
		slack.MsgOptionText(slackui.ElicitText(rec.Tool, rec.Message), false), slack.MsgOptionBlocks(blocks...))
	if code, gone := slackui.ChannelGone(err); gone {
		// The thread's channel refuses the bot (it was removed, the
		// channel archived): the person is asked in a direct message,
		// where its buttons work as in the thread.
		rec.Channel, ts, err = e.askDirectly(ctx, rec, slackui.GoneAskText(channel, code), blocks)
	}
	if err != nil {
		return fmt.Errorf("post input request: %w", err)
	}
	rec.TS = ts
	if err := e.save(ctx, id, rec, "", ttl); err != nil {
		return err
	}
	e.log.WithField("thread", q.Thread).WithField("call", q.Call).WithField("tool", q.Tool).Info("asked the requester for input; the run is paused")
	return nil
}

// CloseQuestion redraws the message of q, whose call's input expired,
// without its buttons: it says it expired.
func (e *Elicitor) CloseQuestion(ctx context.Context, q runner.Question) error {
	_, channel, _, err := slackui.ParseThread(q.Thread)
	if err != nil {
		return err
	}
	raw, ok, err := e.store.Ref(ctx, Ref(PausedID(q)))
	if err != nil || !ok {
		return err
	}
	var rec Record
	if err := json.Unmarshal(raw, &rec); err != nil || rec.TS == "" {
		return err
	}
	Settle(ctx, e.api, e.log, cmp.Or(rec.Channel, channel), rec.TS, rec, slackui.TextElicitExpired)
	return nil
}

// askDirectly posts the message that asks rec's person, with blocks and
// a first line that says why, in their direct message with the bot, and
// returns that channel and the message's ts.
func (e *Elicitor) askDirectly(ctx context.Context, rec Record, why string, blocks []slack.Block) (channel, ts string, err error) {
	var dm *slack.Channel
	err = slackretry.Do(ctx, func() error {
		var err error
		dm, _, _, err = e.api.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{rec.Requester}})
		return err
	})
	if err != nil {
		return "", "", err
	}
	if dm == nil || dm.ID == "" {
		return "", "", fmt.Errorf("conversations.open named no channel")
	}
	blocks = append([]slack.Block{slackui.SectionBlock(why)}, blocks...)
	ts, err = slackretry.Post(ctx, e.api, dm.ID, slack.MsgOptionText(slackui.ElicitText(rec.Tool, rec.Message), false), slack.MsgOptionBlocks(blocks...))
	return dm.ID, ts, err
}
