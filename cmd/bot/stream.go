package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/handlers"
)

// streaming reads how the Slack front end streams answers:
// SLACK_STREAMING (auto: Slack's streaming methods where the workspace
// has them, else post and update; update: always post and update; off:
// post answers whole) and SLACK_STREAM_INTERVAL (the least time between
// two changes of a growing answer, default 1s). on is false when answers
// are posted whole.
func streaming(getenv func(string) string) (opts handlers.StreamOptions, on bool, err error) {
	switch mode := strings.ToLower(getenv("SLACK_STREAMING")); mode {
	case "", "auto":
	case "update":
		opts.UpdateOnly = true
	case "off":
		return opts, false, nil
	default:
		return opts, false, fmt.Errorf("SLACK_STREAMING=%q: want auto, update or off", mode)
	}
	if v := getenv("SLACK_STREAM_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return opts, false, fmt.Errorf("SLACK_STREAM_INTERVAL=%q: want a positive duration such as 1s", v)
		}
		opts.Interval = d
	}
	return opts, true, nil
}
