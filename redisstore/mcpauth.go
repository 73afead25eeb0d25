package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/countersign/countersign/mcpauth"
)

// MCP connections (mcpauth.Store): the sealed connections of one server
// are a hash at <prefix>:mcpconn:<server>, one field per user (the bot's
// own is mcpauth.Service); <prefix>:mcpconn-servers is the set of servers
// that have one. Values are sealed by mcpauth before they get here: the
// store never holds a token in clear. A pending authorization request is
// <prefix>:mcpauth-state:<state>, expiring, taken once with GETDEL.

var _ mcpauth.Store = (*Store)(nil)

func (s *Store) connKey(server string) string { return s.prefix + ":mcpconn:" + escape(server) }
func (s *Store) connServersKey() string       { return s.prefix + ":mcpconn-servers" }
func (s *Store) authStateKey(state string) string {
	return s.prefix + ":mcpauth-state:" + escape(state)
}

// PutConnection keeps a sealed connection. Several processes may call it;
// the last write wins.
func (s *Store) PutConnection(ctx context.Context, server, user string, sealed []byte) error {
	if err := s.rdb.HSet(ctx, s.connKey(server), user, sealed).Err(); err != nil {
		return fmt.Errorf("put connection: %w", err)
	}
	if err := s.rdb.SAdd(ctx, s.connServersKey(), server).Err(); err != nil {
		return fmt.Errorf("put connection: %w", err)
	}
	return nil
}

// Connection returns a sealed connection, or nil when there is none.
func (s *Store) Connection(ctx context.Context, server, user string) ([]byte, error) {
	v, err := s.rdb.HGet(ctx, s.connKey(server), user).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get connection: %w", err)
	}
	return v, nil
}

// DeleteConnection deletes a connection and reports whether there was one.
func (s *Store) DeleteConnection(ctx context.Context, server, user string) (bool, error) {
	n, err := s.rdb.HDel(ctx, s.connKey(server), user).Result()
	if err != nil {
		return false, fmt.Errorf("delete connection: %w", err)
	}
	return n > 0, nil
}

// Connections lists the identities that have a connection to server, or
// to every server when server is empty, sorted.
func (s *Store) Connections(ctx context.Context, server string) ([]mcpauth.Identity, error) {
	servers := []string{server}
	if server == "" {
		var err error
		if servers, err = s.rdb.SMembers(ctx, s.connServersKey()).Result(); err != nil {
			return nil, fmt.Errorf("list connections: %w", err)
		}
		slices.Sort(servers)
	}
	var out []mcpauth.Identity
	for _, srv := range servers {
		users, err := s.rdb.HKeys(ctx, s.connKey(srv)).Result()
		if err != nil {
			return nil, fmt.Errorf("list connections: %w", err)
		}
		slices.Sort(users)
		for _, u := range users {
			out = append(out, mcpauth.Identity{Server: srv, User: u})
		}
	}
	return out, nil
}

// PutAuthState keeps an authorization request for ttl.
func (s *Store) PutAuthState(ctx context.Context, state string, rec []byte, ttl time.Duration) error {
	if strings.TrimSpace(state) == "" {
		return errors.New("put authorization state: empty state")
	}
	if err := s.rdb.Set(ctx, s.authStateKey(state), rec, ttl).Err(); err != nil {
		return fmt.Errorf("put authorization state: %w", err)
	}
	return nil
}

// TakeAuthState returns and deletes an authorization request: of several
// processes taking the same state, one gets it, the others nil.
func (s *Store) TakeAuthState(ctx context.Context, state string) ([]byte, error) {
	v, err := s.rdb.GetDel(ctx, s.authStateKey(state)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("take authorization state: %w", err)
	}
	return v, nil
}
