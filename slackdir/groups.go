// Package slackdir answers who is in a Slack user group or channel, from
// Slack's API, remembering the answers for a while. Approval rules name
// user groups and channels; the runner asks this package whether a person
// is in them, and the reporter whom to send a card by direct message.
package slackdir

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/slackretry"
	"github.com/countersign/countersign/tools"
)

// Groups answers "is this user in that user group" from
// usergroups.users.list, remembering each group's members for a while,
// and "is this user in that channel" from conversations.members,
// remembering each channel's members for a minute. It is the
// runner.Groups and runner.Members of the Slack front end, and safe for
// concurrent use.
//
// With Marks set (SetMarks), what a replica remembers does not outlive a
// change Slack told any replica of (Changed: the subteam_members_changed,
// subteam_updated, member_joined_channel and member_left_channel events).
// InGroup and InChannel, the checks that let a person decide, first read
// the group's (channel's) mark and ask Slack again when it differs from
// the one read before the remembered answer was fetched. A mark grants
// nothing: membership always comes from Slack's API. Members, Users and
// the Remembered forms, which only say whom to notify or what to show,
// answer from memory.
type Groups struct {
	api   *slack.Client
	ttl   time.Duration
	now   func() time.Time
	marks Marks

	mu       sync.Mutex
	groups   map[string]cachedGroup
	channels map[string]cachedGroup
}

// Marks keeps the marks of membership changes where every replica sees
// them (redisstore.Store). A field is "group:<S…>" or "channel:<C…>"; a
// mark is compared for equality, "" when there is none, and begins with
// the Unix time of the change in milliseconds, then "-" (changeSettles).
type Marks interface {
	// MarkMembersChanged gives each field a new mark, kept for ttl after
	// the write; event (the change's event ID) is remembered for seenTTL
	// so that a repeated delivery marks nothing again. It reports whether
	// event was new.
	MarkMembersChanged(ctx context.Context, event string, fields []string, ttl, seenTTL time.Duration) (bool, error)
	// MembersChangedMark returns field's latest mark, or "".
	MembersChangedMark(ctx context.Context, field string) (string, error)
}

// membersTTL is how long a channel's members are remembered: briefly,
// since who may decide a call from the Home tab depends on it.
const membersTTL = time.Minute

// changeSeenTTL is how long a change event is remembered, so that
// Slack's retries of it mark nothing again (as for every event).
const changeSeenTTL = time.Hour

// changeSettles is how long after a change Slack's API may still answer
// what was true before it: Slack sends the change's event as it makes
// the change, and its reads catch up within seconds. An answer fetched
// that soon after a marked change is not remembered for the checks that
// let a person decide: each of them asks Slack again until the window is
// over, so that someone removed from a group does not keep deciding on
// an answer that predates their removal.
const changeSettles = 30 * time.Second

// markTime is when the change marked mark was made (the zero time for a
// mark without one).
func markTime(mark string) time.Time {
	ms, _, ok := strings.Cut(mark, "-")
	if !ok {
		return time.Time{}
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

type cachedGroup struct {
	users   []string
	fetched time.Time
	// mark is the change mark read just before users were fetched;
	// marked says it was read (a lookup that does not decide reads none).
	mark   string
	marked bool
}

// settled reports whether c may be answered from by a check: it was
// fetched once Slack's API had caught up with its mark's change (or it
// has no change marked).
func (c cachedGroup) settled() bool {
	return c.fetched.Sub(markTime(c.mark)) >= changeSettles
}

// NewGroups returns a group lookup through api that keeps each group's
// members for ttl (default 5 minutes). now is the clock (default
// time.Now).
func NewGroups(api *slack.Client, ttl time.Duration, now func() time.Time) *Groups {
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	if now == nil {
		now = time.Now
	}
	return &Groups{api: api, ttl: ttl, now: now, groups: map[string]cachedGroup{}, channels: map[string]cachedGroup{}}
}

// SetMarks makes InGroup and InChannel honour the membership changes kept
// in m, and Changed record them there. Call it before the first lookup.
func (g *Groups) SetMarks(m Marks) { g.marks = m }

// markTTL is how long a change's mark is kept: longer than anything is
// remembered, so that an answer fetched before the change is never taken
// for current once the mark is gone (it has expired by then). Replicas
// share one configuration, hence one TTL.
func (g *Groups) markTTL() time.Duration { return 2 * max(g.ttl, membersTTL) }

// Changed records that the members of groups and channels changed, as
// Slack's event (eventID) says: every replica's next InGroup or
// InChannel on them asks Slack again. What the event says about who
// joined or left is not used. It reports whether the event was new (a
// repeated delivery marks nothing). Without Marks, only this process
// forgets what it remembered.
func (g *Groups) Changed(ctx context.Context, eventID string, groups, channels []string) (bool, error) {
	g.mu.Lock()
	for _, id := range groups {
		delete(g.groups, id)
	}
	for _, id := range channels {
		delete(g.channels, id)
	}
	g.mu.Unlock()
	if g.marks == nil {
		return true, nil
	}
	fields := make([]string, 0, len(groups)+len(channels))
	for _, id := range groups {
		fields = append(fields, groupField(id))
	}
	for _, id := range channels {
		fields = append(fields, channelField(id))
	}
	return g.marks.MarkMembersChanged(ctx, eventID, fields, g.markTTL(), changeSeenTTL)
}

func groupField(id string) string   { return "group:" + id }
func channelField(id string) string { return "channel:" + id }

// InGroup implements runner.Groups: the check that lets user decide.
// With Marks, a group marked as changed since its members were fetched
// is asked of Slack again; if the mark cannot be read or Slack does not
// answer, it returns the error rather than what it remembers.
func (g *Groups) InGroup(ctx context.Context, group, user string) (bool, error) {
	users, err := g.lookup(ctx, g.groups, groupField(group), group, g.ttl, true, g.fetchGroup)
	if err != nil {
		return false, err
	}
	return slices.Contains(users, user), nil
}

// InGroupRemembered is InGroup from memory (up to the TTL old), for what
// only shows whom a call waits for (runner.RememberedGroups).
func (g *Groups) InGroupRemembered(ctx context.Context, group, user string) (bool, error) {
	users, err := g.Members(ctx, group)
	if err != nil {
		return false, err
	}
	return slices.Contains(users, user), nil
}

// Members returns the users of a user group, from memory (up to the TTL
// old): whom to notify, never who may decide. The slice is shared: do
// not change it.
func (g *Groups) Members(ctx context.Context, group string) ([]string, error) {
	return g.lookup(ctx, g.groups, groupField(group), group, g.ttl, false, g.fetchGroup)
}

// InChannel implements runner.Members: the check that lets user decide,
// honouring the channel's change marks as InGroup does a group's.
func (g *Groups) InChannel(ctx context.Context, channel, user string) (bool, error) {
	users, err := g.lookup(ctx, g.channels, channelField(channel), channel, membersTTL, true, g.fetchChannel)
	if err != nil {
		return false, err
	}
	return slices.Contains(users, user), nil
}

// InChannelRemembered is InChannel from memory (up to a minute old), for
// what only shows whom a call waits for (runner.RememberedMembers).
func (g *Groups) InChannelRemembered(ctx context.Context, channel, user string) (bool, error) {
	users, err := g.lookup(ctx, g.channels, channelField(channel), channel, membersTTL, false, g.fetchChannel)
	if err != nil {
		return false, err
	}
	return slices.Contains(users, user), nil
}

// lookup returns the members of id from cache, or from fetch when what
// is remembered is older than ttl or — when checked and with Marks —
// was fetched before the latest change marked under field. The mark is
// read before fetching, so a change marked during the fetch makes the
// next checked lookup fetch again: an entry's mark is always one read
// before its members were fetched.
func (g *Groups) lookup(ctx context.Context, cache map[string]cachedGroup, field, id string, ttl time.Duration, checked bool,
	fetch func(context.Context, string) ([]string, error)) ([]string, error) {
	checked = checked && g.marks != nil
	var mark string
	if checked {
		var err error
		if mark, err = g.marks.MembersChangedMark(ctx, field); err != nil {
			return nil, fmt.Errorf("whether the members of %s changed: %w", id, err)
		}
	}
	g.mu.Lock()
	c, ok := cache[id]
	g.mu.Unlock()
	if ok && g.now().Sub(c.fetched) <= ttl && (!checked || (c.marked && c.mark == mark && c.settled())) {
		return c.users, nil
	}
	users, err := fetch(ctx, id)
	if err != nil {
		return nil, err
	}
	if !checked {
		// The mark read before the previous fetch was read before this
		// one too: it still covers what this answer covers.
		mark, checked = c.mark, c.marked
	}
	c = cachedGroup{users: users, fetched: g.now(), mark: mark, marked: checked}
	g.mu.Lock()
	cache[id] = c
	g.mu.Unlock()
	return c.users, nil
}

func (g *Groups) fetchGroup(ctx context.Context, group string) ([]string, error) {
	return g.api.GetUserGroupMembersContext(ctx, group)
}

func (g *Groups) fetchChannel(ctx context.Context, channel string) ([]string, error) {
	var users []string
	cursor := ""
	for {
		page, next, err := g.api.GetUsersInConversationContext(ctx, &slack.GetUsersInConversationParameters{
			ChannelID: channel, Cursor: cursor, Limit: 1000})
		if err != nil {
			return nil, err
		}
		users = append(users, page...)
		if next == "" {
			return users, nil
		}
		cursor = next
	}
}

// ErrNoLookup: there is no user-group lookup (a nil *Groups).
var ErrNoLookup = errors.New("no user-group lookup")

// Users are the users that ids name, directly or as members of the user
// groups among them, once each and in order, without skip. Slack's rate
// limit is waited out, as for messages; a group whose members cannot be
// listed (any group, when g is nil) is left out and passed to missed
// with the reason.
func (g *Groups) Users(ctx context.Context, ids []string, skip string, missed func(group string, err error)) []string {
	var users []string
	add := func(u string) {
		if u != skip && !slices.Contains(users, u) {
			users = append(users, u)
		}
	}
	for _, id := range ids {
		if !tools.IsGroupID(id) {
			add(id)
			continue
		}
		if g == nil {
			missed(id, ErrNoLookup)
			continue
		}
		var members []string
		err := slackretry.Do(ctx, func() error {
			var err error
			members, err = g.Members(ctx, id)
			return err
		})
		if err != nil {
			missed(id, err)
			continue
		}
		for _, u := range members {
			add(u)
		}
	}
	return users
}
