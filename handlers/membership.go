package handlers

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/tools"
)

// MembershipChanges takes Slack's word that the members of user groups or
// channels changed (slackdir.Groups). It only marks them as changed, for
// every replica to ask Slack's API again before their membership lets
// anyone decide: what an event says about who joined or left grants
// nothing. It reports whether the event was new.
type MembershipChanges interface {
	Changed(ctx context.Context, eventID string, groups, channels []string) (bool, error)
}

// The events that say a user group's or a channel's members changed.
const (
	evSubteamMembersChanged = "subteam_members_changed"
	evSubteamUpdated        = "subteam_updated"
	evMemberJoinedChannel   = "member_joined_channel"
	evMemberLeftChannel     = "member_left_channel"
)

// membershipChange reads which user group or channel an event of type
// typ says changed: false if the event is not one of those above, or
// does not name a group (channel) by a well-formed ID. Nothing else of
// the event is read.
func membershipChange(typ string, raw json.RawMessage) (group, channel string, ok bool) {
	switch typ {
	case evSubteamMembersChanged:
		var ev struct {
			SubteamID string `json:"subteam_id"`
		}
		if json.Unmarshal(raw, &ev) != nil || !tools.IsGroupID(ev.SubteamID) {
			return "", "", false
		}
		return ev.SubteamID, "", true
	case evSubteamUpdated:
		var ev struct {
			Subteam struct {
				ID string `json:"id"`
			} `json:"subteam"`
		}
		if json.Unmarshal(raw, &ev) != nil || !tools.IsGroupID(ev.Subteam.ID) {
			return "", "", false
		}
		return ev.Subteam.ID, "", true
	case evMemberJoinedChannel, evMemberLeftChannel:
		var ev struct {
			Channel string `json:"channel"`
		}
		if json.Unmarshal(raw, &ev) != nil || !isChannelID(ev.Channel) {
			return "", "", false
		}
		return "", ev.Channel, true
	}
	return "", "", false
}

// isChannelID reports whether id looks like a Slack conversation ID: a
// capital letter (C, G, D) and capitals and digits, at most 32 in all.
func isChannelID(id string) bool {
	if len(id) < 2 || len(id) > 32 || (id[0] != 'C' && id[0] != 'G' && id[0] != 'D') {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// membershipChanged marks the group or channel an event names as changed,
// once per event ID, before acknowledging it: a change not recorded is
// answered 503, and Slack delivers it again. One small Redis write.
func (s *Server) membershipChanged(w http.ResponseWriter, r *http.Request, eventID, group, channel string) {
	if s.opts.Membership == nil {
		w.WriteHeader(http.StatusOK)
		return
	}
	var groups, channels []string
	if group != "" {
		groups = []string{group}
	}
	if channel != "" {
		channels = []string{channel}
	}
	log := s.log.WithFields(logrus.Fields{"event": eventID, "group": group, "channel": channel})
	first, err := s.opts.Membership.Changed(r.Context(), eventID, groups, channels)
	if err != nil {
		log.WithError(err).Error("recording a membership change; Slack delivers it again")
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	log.WithField("first", first).Debug("members changed: asked of Slack again before they decide")
	w.WriteHeader(http.StatusOK)
}
