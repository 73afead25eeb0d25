package slackui_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/slackui"
)

// Slack's answers that say the bot can no longer post in a channel are
// told from those that may change by asking again.
func TestChannelGone(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"not_in_channel": true, "channel_not_found": true, "is_archived": true, "channel_is_archived": true,
		"ratelimited": false, "internal_error": false, "message_not_found": false, "msg_too_long": false,
	} {
		err := error(slack.SlackErrorResponse{Err: code})
		if _, gone := slackui.ChannelGone(err); gone != want {
			t.Errorf("ChannelGone(%s) = %v, want %v", code, gone, want)
		}
	}
	if _, gone := slackui.ChannelGone(errors.New("not_in_channel")); gone {
		t.Error("ChannelGone of an error that is not Slack's answer = true")
	}
	if _, gone := slackui.ChannelGone(nil); gone {
		t.Error("ChannelGone(nil) = true")
	}
}

// The answer sent by direct message says why, is escaped as mrkdwn (no
// mention, broadcast or disguised link of the model's becomes live), is
// cut to a bounded size, and leaves no code block open.
func TestGoneAnswerText(t *testing.T) {
	t.Parallel()
	answer := "Done <!channel> <@U0EVE> <https://evil.example|docs> & more\n```\n" + strings.Repeat("x", 10_000)
	got := slackui.GoneAnswerText("C0123", "not_in_channel", answer)
	for _, want := range []string{"<#C0123>", "removed from it", "&lt;!channel&gt;", "&lt;@U0EVE&gt;", "&amp; more"} {
		if !strings.Contains(got, want) {
			t.Errorf("the text does not show %q: %.200q", want, got)
		}
	}
	for _, live := range []string{"<!channel>", "<@U0EVE>", "<https://evil"} {
		if strings.Contains(got, live) {
			t.Errorf("the text carries %q live", live)
		}
	}
	if n := len([]rune(got)); n > slackui.BudgetDM+300 {
		t.Errorf("the text is %d characters long, want about %d at most", n, slackui.BudgetDM)
	}
	if strings.Count(got, "```")%2 != 0 {
		t.Errorf("the text leaves a code block open")
	}
	if archived := slackui.GoneAnswerText("C0123", "is_archived", "ok"); !strings.Contains(archived, "it was archived") {
		t.Errorf("an archived channel's text = %q", archived)
	}
}

// A new request in an archived channel is told so, rather than to invite
// the bot.
func TestCantPostTextArchived(t *testing.T) {
	t.Parallel()
	got := slackui.CantPostText(slack.SlackErrorResponse{Err: "is_archived"})
	if !strings.Contains(got, "archived") || strings.Contains(got, "/invite") {
		t.Errorf("CantPostText(is_archived) = %q", got)
	}
}
