package slackdir_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/countersign/countersign/slackdir"
)

// Without a lookup, the users named directly still get their direct
// message, once each and without the one skipped; each group is reported
// as missed.
func TestUsersWithoutLookup(t *testing.T) {
	var g *slackdir.Groups
	var missed []string
	got := g.Users(context.Background(), []string{"U1", "S1", "U2", "U1", "U3"}, "U2", func(group string, err error) {
		if !errors.Is(err, slackdir.ErrNoLookup) {
			t.Errorf("missed %s with %v, want ErrNoLookup", group, err)
		}
		missed = append(missed, group)
	})
	if want := []string{"U1", "U3"}; !slices.Equal(got, want) {
		t.Errorf("Users = %v, want %v", got, want)
	}
	if want := []string{"S1"}; !slices.Equal(missed, want) {
		t.Errorf("missed %v, want %v", missed, want)
	}
}
