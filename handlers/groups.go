package handlers

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// Groups answers "is this user in that user group" from
// usergroups.users.list, remembering each group's members for a while.
// It is the runner.Groups of the Slack front end, and safe for concurrent
// use.
type Groups struct {
	api *slack.Client
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	groups map[string]cachedGroup
}

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
	return &Groups{api: api, ttl: ttl, now: now, groups: map[string]cachedGroup{}}
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
