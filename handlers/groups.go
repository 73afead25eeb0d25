package handlers

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// groupCache answers "is this user in that user group" from
// usergroups.users.list, remembering each group's members for a while.
type groupCache struct {
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

func newGroupCache(api *slack.Client, ttl time.Duration, now func() time.Time) *groupCache {
	return &groupCache{api: api, ttl: ttl, now: now, groups: map[string]cachedGroup{}}
}

// contains reports whether user is a member of group. Its signature is
// the one tools.Rule.MayApprove takes; ctx comes from the closure.
func (g *groupCache) contains(ctx context.Context) func(group, user string) (bool, error) {
	return func(group, user string) (bool, error) {
		g.mu.Lock()
		c, ok := g.groups[group]
		g.mu.Unlock()
		if !ok || g.now().Sub(c.fetched) > g.ttl {
			users, err := g.api.GetUserGroupMembersContext(ctx, group)
			if err != nil {
				return false, err
			}
			c = cachedGroup{users: users, fetched: g.now()}
			g.mu.Lock()
			g.groups[group] = c
			g.mu.Unlock()
		}
		return slices.Contains(c.users, user), nil
	}
}
