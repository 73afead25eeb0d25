package handlers

import (
	"encoding/json"
	"testing"

	"github.com/countersign/countersign/tools"
)

// The membership events as Slack documents them name the group or
// channel that changed; nothing else of them is read, and events that
// name none by a well-formed ID are not membership changes.
func TestMembershipChange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ, raw       string
		group, channel string
		ok             bool
	}{
		{evSubteamMembersChanged, `{"type":"subteam_members_changed","subteam_id":"S0614TZR7","team_id":"T060RNRCH",` +
			`"date_previous_update":1446670362,"date_update":1492906952,"added_users":["U060RNRCZ"],"added_users_count":"1",` +
			`"removed_users":["U060ULRC0"],"removed_users_count":"1"}`, "S0614TZR7", "", true},
		{evSubteamUpdated, `{"type":"subteam_updated","subteam":{"id":"S0614TZR7","team_id":"T060RNRCH","is_usergroup":true,` +
			`"handle":"ops","users":["U060RNRCZ","U0MALLORY"],"user_count":"2"}}`, "S0614TZR7", "", true},
		{evMemberJoinedChannel, `{"type":"member_joined_channel","user":"W06GH7XHN","channel":"C0698JE0H","channel_type":"C",` +
			`"team":"T024BE7LD","inviter":"U123456789"}`, "", "C0698JE0H", true},
		{evMemberLeftChannel, `{"type":"member_left_channel","user":"W06GH7XHN","channel":"G0698JE0H","channel_type":"G",` +
			`"team":"T024BE7LD"}`, "", "G0698JE0H", true},
		{evSubteamMembersChanged, `{"subteam_id":"U0MALLORY"}`, "", "", false},
		{evSubteamMembersChanged, `{"subteam_id":"S1\"}"}`, "", "", false},
		{evSubteamUpdated, `{"subteam":"S1"}`, "", "", false},
		{evMemberLeftChannel, `{"channel":{"id":"C1"}}`, "", "", false},
		{evMemberJoinedChannel, `{"channel":"c0698je0h"}`, "", "", false},
		{"message", `{"channel":"C0698JE0H","subteam_id":"S1"}`, "", "", false},
	}
	for _, tt := range tests {
		group, channel, ok := membershipChange(tt.typ, json.RawMessage(tt.raw))
		if group != tt.group || channel != tt.channel || ok != tt.ok {
			t.Errorf("membershipChange(%s, %s) = %q, %q, %v; want %q, %q, %v", tt.typ, tt.raw, group, channel, ok, tt.group, tt.channel, tt.ok)
		}
	}
}

// FuzzMembershipChange: whatever an event holds, a membership change names
// exactly one group (a user-group ID) or one channel (a conversation
// ID), and it is the ID the event's own field holds.
func FuzzMembershipChange(f *testing.F) {
	for _, seed := range []struct{ typ, raw string }{
		{evSubteamMembersChanged, `{"subteam_id":"S0614TZR7","added_users":["U1"],"removed_users":[]}`},
		{evSubteamUpdated, `{"subteam":{"id":"S0614TZR7","users":["U1"]}}`},
		{evMemberJoinedChannel, `{"user":"U1","channel":"C0698JE0H"}`},
		{evMemberLeftChannel, `{"user":"U1","channel":"D0698JE0H"}`},
		{evSubteamMembersChanged, `{"subteam_id":"\u0053ABC"}`},
		{evSubteamUpdated, `{"subteam":null}`},
		{evMemberLeftChannel, `{"channel":"C"}`},
		{"app_mention", `{"channel":"C1"}`},
		{evSubteamMembersChanged, `[`},
	} {
		f.Add(seed.typ, []byte(seed.raw))
	}
	f.Fuzz(func(t *testing.T, typ string, raw []byte) {
		group, channel, ok := membershipChange(typ, raw)
		if !ok {
			if group != "" || channel != "" {
				t.Fatalf("not a change, but names %q, %q", group, channel)
			}
			return
		}
		var fields struct {
			SubteamID string `json:"subteam_id"`
			Subteam   struct {
				ID string `json:"id"`
			} `json:"subteam"`
			Channel string `json:"channel"`
		}
		_ = json.Unmarshal(raw, &fields)
		switch typ {
		case evSubteamMembersChanged:
			if group != fields.SubteamID || channel != "" || !tools.IsGroupID(group) {
				t.Fatalf("%s %s: %q, %q", typ, raw, group, channel)
			}
		case evSubteamUpdated:
			if group != fields.Subteam.ID || channel != "" || !tools.IsGroupID(group) {
				t.Fatalf("%s %s: %q, %q", typ, raw, group, channel)
			}
		case evMemberJoinedChannel, evMemberLeftChannel:
			if channel != fields.Channel || group != "" || !isChannelID(channel) {
				t.Fatalf("%s %s: %q, %q", typ, raw, group, channel)
			}
		default:
			t.Fatalf("an event of type %q is a membership change", typ)
		}
	})
}
