// Package slackdir answers who is in a Slack user group or channel, from
// Slack's API, remembering the answers for a while. Approval rules name
// user groups and channels; the runner asks this package whether a person
// is in them, and the reporter whom to send a card by direct message.
package slackdir

import (
	"context"
	"errors"
	"slices"
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
type Groups struct {
	api *slack.Client
	ttl time.Duration
	now func() time.Time

	mu       sync.Mutex
	groups   map[string]cachedGroup
	channels map[string]cachedGroup
}

// membersTTL is how long a channel's members are remembered: briefly,
// since who may decide a call from the Home tab depends on it.
const membersTTL = time.Minute

type cachedGroup struct {
	users   []string
	fetched time.Time
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

// InGroup implements runner.Groups.
func (g *Groups) InGroup(ctx context.Context, group, user string) (bool, error) {
	users, err := g.Members(ctx, group)
	if err != nil {
		return false, err
	}
	return slices.Contains(users, user), nil
}

// Members returns the users of a user group. The slice is shared: do not
// change it.
func (g *Groups) Members(ctx context.Context, group string) ([]string, error) {
	g.mu.Lock()
	c, ok := g.groups[group]
	g.mu.Unlock()
	if !ok || g.now().Sub(c.fetched) > g.ttl {
		users, err := g.api.GetUserGroupMembersContext(ctx, group)
		if err != nil {
			return nil, err
		}
		c = cachedGroup{users: users, fetched: g.now()}
		g.mu.Lock()
		g.groups[group] = c
		g.mu.Unlock()
	}
	return c.users, nil
}

// InChannel implements runner.Members.
func (g *Groups) InChannel(ctx context.Context, channel, user string) (bool, error) {
	g.mu.Lock()
	c, ok := g.channels[channel]
	g.mu.Unlock()
	if !ok || g.now().Sub(c.fetched) > membersTTL {
		var users []string
		cursor := ""
		for {
			page, next, err := g.api.GetUsersInConversationContext(ctx, &slack.GetUsersInConversationParameters{
				ChannelID: channel, Cursor: cursor, Limit: 1000})
			if err != nil {
				return false, err
			}
			users = append(users, page...)
			if next == "" {
				break
			}
			cursor = next
		}
		c = cachedGroup{users: users, fetched: g.now()}
		g.mu.Lock()
		g.channels[channel] = c
		g.mu.Unlock()
	}
	return slices.Contains(c.users, user), nil
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
