package slackui

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadThread: a thread key is not "<team>:<channel>:<ts>".
var ErrBadThread = errors.New("not a Slack thread key")

// ThreadKey is the conversation key of a Slack thread.
func ThreadKey(team, channel, ts string) string { return team + ":" + channel + ":" + ts }

// ParseThread splits a thread key into team, channel and root ts.
func ParseThread(thread string) (team, channel, ts string, err error) {
	parts := strings.SplitN(thread, ":", 3)
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return "", "", "", fmt.Errorf("%w: %q", ErrBadThread, thread)
	}
	return parts[0], parts[1], parts[2], nil
}
