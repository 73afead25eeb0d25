package handlers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/interrupt"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/tools"
)

// The Home tab: each person's inbox in Slack. It lists the calls that
// wait for their decision across channels, newest first (the runner's
// WaitingCalls: whom a call waits for is the runner's to say), with the
// buttons of the calls' cards — the same action IDs and the same opaque
// value, so a click goes through runner.Decide like any other, marked as
// made from an inbox — and what they decided lately.
//
// A view is published when the person opens the tab (app_home_opened),
// after they click in it, and whenever the runner reports that calls
// began or stopped waiting (runner.InboxChanged) for everyone who has
// opened the tab and is concerned: those the calls wait or waited for,
// and those who decided.

// HomeStore keeps who has opened the Home tab, so that their views are
// published again when something changes. It must be safe for concurrent
// use by many processes.
type HomeStore interface {
	HomeOpened(ctx context.Context, user string, at time.Time) error
	HomeOpeners(ctx context.Context, since time.Time) ([]string, error)
}

// Limits of the Home view: Slack allows 100 blocks in it.
const (
	homeMaxCalls  = 15 // calls shown, 5 blocks each
	homeMaxRecent = 10 // recent decisions shown, one block each
	// budgetSummary is a call's arguments in the view (its card shows
	// all of them).
	budgetSummary = 1500
	// homeOpenersFor is how long after opening the tab a person's view
	// is kept up to date.
	homeOpenersFor = 30 * 24 * time.Hour
)

// homeMetaPrefix marks the private metadata of a modal opened from the
// Home tab, so that its submission is decided as made from an inbox.
const homeMetaPrefix = "home:"

// Home publishes people's Home tabs. It is safe for concurrent use.
type Home struct {
	api     *slack.Client
	svc     *runner.Service
	store   Store
	openers HomeStore
	teamURL string
	now     func() time.Time
	log     logrus.FieldLogger

	// A person's views are published one at a time, each read when its
	// turn comes, so that the last one published is the newest.
	publishing [64]sync.Mutex
}

// Opened records that user opened the tab, and publishes their view.
func (h *Home) Opened(ctx context.Context, user string) {
	if err := h.openers.HomeOpened(ctx, user, h.now()); err != nil {
		h.log.WithField("user", user).WithError(err).Warn("recording who opened the Home tab")
	}
	h.Publish(ctx, user, "")
}

// Changed publishes again the views of those concerned by a change of
// the inbox who have opened the tab.
func (h *Home) Changed(ctx context.Context, ch *runner.InboxChange) {
	if ch == nil {
		return
	}
	openers, err := h.openers.HomeOpeners(ctx, h.now().Add(-homeOpenersFor))
	if err != nil {
		h.log.WithError(err).Warn("reading who opened the Home tab")
		return
	}
	calls := append(append([]runner.InboxEntry(nil), ch.Added...), ch.Removed...)
	for _, user := range openers {
		concerned := false
		for _, d := range ch.Decided {
			concerned = concerned || d.By == user
		}
		for _, e := range calls {
			if concerned {
				break
			}
			ok, err := h.svc.WaitsFor(ctx, e, user)
			if err != nil {
				// Unknown is not "not concerned": publishing again
				// costs little, a stale view shows a call as waiting.
				h.log.WithFields(logrus.Fields{"user": user, "thread": e.Thread}).WithError(err).Warn("checking whom a call waits for; publishing the view again")
				ok = true
			}
			concerned = ok
		}
		if concerned {
			h.Publish(ctx, user, "")
		}
	}
}

// Publish publishes user's view, with notice (if any) at its top: what
// happened to their last click.
func (h *Home) Publish(ctx context.Context, user, notice string) {
	lock := &h.publishing[fnv32(user)%uint32(len(h.publishing))]
	lock.Lock()
	defer lock.Unlock()
	log := h.log.WithField("user", user)
	// Only Slack threads: a conversation in the terminal (bot chat) has
	// no card to click.
	slackThread := func(e runner.InboxEntry) bool { _, _, _, err := ParseThread(e.Thread); return err == nil }
	calls, err := h.svc.WaitingCalls(ctx, runner.InboxQuery{User: user, Where: slackThread, Limit: homeMaxCalls + 1})
	if err != nil {
		log.WithError(err).Warn("listing the calls waiting for someone")
		notice = strings.TrimSpace(notice + "\n" + textTryAgain)
	}
	more := len(calls) > homeMaxCalls
	calls = calls[:min(len(calls), homeMaxCalls)]
	refs := make([]string, len(calls))
	for i, w := range calls {
		if refs[i], err = cardRef(ctx, h.store, w.Thread, w.AgentCall); err != nil {
			// The view is published all the same, without the calls
			// and saying to try again: the person's last click is
			// answered, never left without a word.
			log.WithField("thread", w.Thread).WithError(err).Warn("finding a card's reference")
			calls, refs, more = nil, nil, false
			notice = strings.TrimSpace(notice + "\n" + textTryAgain)
			break
		}
	}
	recent, err := h.svc.RecentDecisions(ctx, user, homeMaxRecent)
	if err != nil {
		log.WithError(err).Warn("reading recent decisions")
	}
	view := HomeView(HomeContent{Calls: calls, Refs: refs, More: more, Recent: recent, Notice: notice, TeamURL: h.teamURL}, h.now())
	if _, err := h.api.PublishViewContext(ctx, slack.PublishViewContextRequest{UserID: user, View: view}); err != nil {
		log.WithError(err).Warn("publishing the Home tab")
	}
}

// HomeContent is what a Home view shows.
type HomeContent struct {
	// Calls wait for the viewer, newest first; Refs are their buttons'
	// values; More says there are more than those.
	Calls []runner.Waiting
	Refs  []string
	More  bool
	// Recent are the viewer's recent decisions, newest first.
	Recent []runner.DecisionRecord
	// Notice, if set, is shown first: what became of the last click.
	Notice string
	// TeamURL is the workspace's URL, for links to threads (default
	// https://slack.com/).
	TeamURL string
}

// HomeView is the Home tab of a person: the calls waiting for them, each
// with its tool, a summary of its arguments (credentials masked), who
// asked, where, how long it has waited, a link to its thread and the
// buttons of its card; then what they decided lately. now is the clock
// waiting times are measured by.
func HomeView(hc HomeContent, now time.Time) slack.HomeTabViewRequest {
	blocks := []slack.Block{headerBlock("Waiting for your decision")}
	if hc.Notice != "" {
		blocks = append(blocks, sectionBlock("⚠️ "+clipText(hc.Notice, budgetError)))
	}
	switch n := len(hc.Calls); {
	case n == 0:
		blocks = append(blocks, contextBlock("Nothing waits for you. Tool calls that need your approval show up here, from every channel, with the buttons of their cards."))
	case hc.More:
		blocks = append(blocks, contextBlock(fmt.Sprintf("The %d newest of the calls waiting for you; the others wait in their threads.", n)))
	case n == 1:
		blocks = append(blocks, contextBlock("1 call waits for you."))
	default:
		blocks = append(blocks, contextBlock(fmt.Sprintf("%d calls wait for you, newest first.", n)))
	}
	for i, w := range hc.Calls {
		summary, clipped := homeSummary(w.AgentCall)
		blocks = append(blocks,
			slack.NewDividerBlock(),
			sectionBlock("*Approval needed:* "+codeSpan(w.Tool)+"\n"+summary),
			contextBlock(homeCallLine(w, hc.TeamURL, now)),
		)
		buttons := []slack.BlockElement{
			buttonElement(ActionApprove, "Approve", hc.Refs[i], slack.StylePrimary),
			buttonElement(ActionEdit, "Edit", hc.Refs[i], slack.StyleDefault),
			buttonElement(ActionReject, "Reject", hc.Refs[i], slack.StyleDanger),
		}
		if clipped {
			buttons = append(buttons, buttonElement(ActionShowArgs, "Show all", hc.Refs[i], slack.StyleDefault))
		}
		blocks = append(blocks, slack.NewActionBlock(fmt.Sprintf("%s_%d", BlockCallActions, i), buttons...))
	}
	blocks = append(blocks, slack.NewDividerBlock(), headerBlock("You decided lately"))
	if len(hc.Recent) == 0 {
		blocks = append(blocks, contextBlock("Nothing yet."))
	}
	for _, d := range hc.Recent[:min(len(hc.Recent), homeMaxRecent)] {
		blocks = append(blocks, contextBlock(recentLine(d, hc.TeamURL)))
	}
	return slack.HomeTabViewRequest{Type: slack.VTHomeTab, Blocks: slack.Blocks{BlockSet: blocks}}
}

// homeCallLine says who asked for a call, where, how long it has waited,
// the hash an approval binds to, and links its thread.
func homeCallLine(w runner.Waiting, teamURL string, now time.Time) string {
	parts := []string{"Requested by " + userMention(w.Requester)}
	if w.Channel != "" {
		parts[0] += " in " + channelMention(w.Channel)
	}
	if !w.Since.IsZero() {
		parts = append(parts, "waiting "+agoText(now.Sub(w.Since))+" (since "+slackDate(w.Since)+")")
	}
	if !w.Expires.IsZero() {
		parts = append(parts, "expires "+untilText(w.Expires.Sub(now)))
	}
	parts = append(parts, "🔏 "+codeSpan("sha256:"+tools.ShortHash(w.AgentCall.RunHash())))
	if link := threadLink(w.Thread, teamURL); link != "" {
		parts = append(parts, "<"+link+"|Open the thread>")
	}
	return strings.Join(parts, " · ")
}

// recentLine is one of a person's recent decisions.
func recentLine(d runner.DecisionRecord, teamURL string) string {
	var what string
	switch d.Kind {
	case interrupt.Approve:
		what = "✅ Approved"
	case interrupt.Edit:
		what = "✏️ Edited and approved"
	case interrupt.Reject:
		what = "🚫 Rejected"
	case interrupt.Respond:
		what = "💬 Rejected with a reply"
	case interrupt.MarkDone:
		what = "☑️ Marked done"
	default:
		what = slackEscape(d.Kind.Past())
	}
	line := what + " " + codeSpan(d.Tool)
	if d.Channel != "" {
		line += " in " + channelMention(d.Channel)
	}
	if !d.At.IsZero() {
		line += " · " + slackDate(d.At)
	}
	if link := threadLink(d.Thread, teamURL); link != "" {
		line += " · <" + link + "|thread>"
	}
	if r := strings.TrimSpace(d.Reason); r != "" {
		line += " — " + clipText(slackEscape(oneLine(r)), 150)
	}
	return line
}

// homeSummary is a call's target and arguments, credentials masked: for
// http_request the method and the URL as dialled, and whether it sends
// headers or a body; for another tool its arguments as JSON. clipped says
// something was left out, which "Show all" then shows.
func homeSummary(c agent.Call) (text string, clipped bool) {
	args := shownArgs(c)
	if c.Tool == tools.HTTPRequestName {
		var a struct {
			Method  string            `json:"method"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
			Body    *string           `json:"body"`
		}
		if json.Unmarshal(args, &a) == nil {
			shown, _ := dialledURL(a.URL)
			target := a.Method + " " + shown
			code, n := fitCode(target, budgetSummary)
			clipped = n < len([]rune(target))
			var extra []string
			if len(a.Headers) == 1 {
				extra = append(extra, "1 header")
			} else if len(a.Headers) > 1 {
				extra = append(extra, fmt.Sprintf("%d headers", len(a.Headers)))
			}
			if a.Body != nil {
				extra = append(extra, "a body")
			}
			if len(extra) > 0 {
				code += "\n_with " + strings.Join(extra, " and ") + ": *Show all* shows them_"
				clipped = true
			}
			return code, clipped
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, args) != nil {
		b.Reset()
		b.Write(args)
	}
	if b.Len() == 0 {
		return "_no arguments_", false
	}
	code, n := fitCode(b.String(), budgetSummary)
	return code, n < len([]rune(b.String()))
}

// agoText says how long ago something began.
func agoText(d time.Duration) string {
	d = d.Round(time.Minute)
	switch {
	case d < time.Minute:
		return "less than a minute"
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh %dm", h, m)
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// channelMention links a channel ID; anything else is shown as text.
func channelMention(id string) string {
	for _, r := range id {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return clipText(slackEscape(id), budgetName)
		}
	}
	if id == "" || len(id) > budgetName {
		return "_a channel_"
	}
	return "<#" + id + ">"
}

// threadLink is the URL of a thread's root message, or "" if the thread
// is not a Slack one.
func threadLink(thread, teamURL string) string {
	_, channel, ts, err := ParseThread(thread)
	if err != nil || strings.ContainsAny(channel+ts, "<>|& /?#") {
		return ""
	}
	if teamURL == "" {
		teamURL = "https://slack.com/"
	}
	return strings.TrimSuffix(teamURL, "/") + "/archives/" + channel + "/p" + strings.ReplaceAll(ts, ".", "")
}

// cardRef is the opaque value of the buttons of c's card in thread, for
// its decision round: the one the card was posted with, or a new one if
// there is none yet (the card and the Home tab share it).
func cardRef(ctx context.Context, store Store, thread string, c agent.Call) (string, error) {
	key := cardRefKey(c.Key, c.Attempts)
	claims, err := store.ClaimValues(ctx, thread, []string{key})
	if err != nil {
		return "", err
	}
	if v, ok := claims[key]; ok {
		return string(v), nil
	}
	return newCardRef(ctx, store, thread, c)
}

// newCardRef stores a reference for c's card and records it for the
// thread, unless one was recorded meanwhile: then that one is returned.
func newCardRef(ctx context.Context, store Store, thread string, c agent.Call) (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	value := hex.EncodeToString(b[:])
	raw, _ := json.Marshal(ref{Thread: thread, Call: c.Key, Attempt: c.Attempts, Hash: c.RunHash()})
	if err := store.PutRef(ctx, value, raw, refTTL); err != nil {
		return "", fmt.Errorf("store card reference: %w", err)
	}
	winner, _, err := store.Claim(ctx, thread, cardRefKey(c.Key, c.Attempts), []byte(value))
	if err != nil {
		return "", fmt.Errorf("record card reference: %w", err)
	}
	return string(winner), nil
}

// fnv32 is the FNV-1a hash of s.
func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

func cardRefKey(call string, attempt int) string { return fmt.Sprintf("cardref:%s#%d", call, attempt) }
