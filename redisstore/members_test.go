package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/redisstore"
)

// A membership change event marks its groups and channels once: a
// repeated delivery changes no mark, a new event gives the fields it
// names a new mark and leaves the others alone, and the marks expire a
// while after the latest change.
func TestMembersChangedMarks(t *testing.T) {
	t.Parallel()
	for _, tt := range servers {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := tt.rdb(t)
			prefix := uniqueName("members")
			s := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			mark := func(field string) string {
				t.Helper()
				m, err := s.MembersChangedMark(ctx, field)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			if m := mark("group:S1"); m != "" {
				t.Fatalf("a group never changed has the mark %q, want none", m)
			}
			first, err := s.MarkMembersChanged(ctx, "Ev1", []string{"group:S1", "channel:C1"}, 10*time.Minute, time.Hour)
			if err != nil || !first {
				t.Fatalf("MarkMembersChanged(Ev1) = %v, %v; want true, nil", first, err)
			}
			g1, c1 := mark("group:S1"), mark("channel:C1")
			if g1 == "" || c1 == "" {
				t.Fatalf("marks after Ev1: group %q, channel %q; want both set", g1, c1)
			}
			if first, err := s.MarkMembersChanged(ctx, "Ev1", []string{"group:S1"}, 10*time.Minute, time.Hour); err != nil || first {
				t.Fatalf("MarkMembersChanged(Ev1 again) = %v, %v; want false, nil", first, err)
			}
			if m := mark("group:S1"); m != g1 {
				t.Errorf("a repeated delivery changed the group's mark from %q to %q", g1, m)
			}
			if first, err := s.MarkMembersChanged(ctx, "Ev2", []string{"group:S1"}, 10*time.Minute, time.Hour); err != nil || !first {
				t.Fatalf("MarkMembersChanged(Ev2) = %v, %v; want true, nil", first, err)
			}
			if m := mark("group:S1"); m == g1 || m == "" {
				t.Errorf("the group's mark after a second change is %q, want a new one (was %q)", m, g1)
			}
			if m := mark("channel:C1"); m != c1 {
				t.Errorf("a change of the group changed the channel's mark from %q to %q", c1, m)
			}
			if m := mark("group:S2"); m != "" {
				t.Errorf("another group has the mark %q, want none", m)
			}
			ttl, err := rdb.PTTL(ctx, prefix+":{members}:changed").Result()
			if err != nil || ttl <= 0 || ttl > 10*time.Minute {
				t.Errorf("the marks expire in %v (%v), want within 10m", ttl, err)
			}
		})
	}
}
