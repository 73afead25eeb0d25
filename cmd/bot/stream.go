package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/runner"
)

// streaming sets up streamed answers for the Slack front end, as
// SLACK_STREAMING (auto: Slack's streaming methods where the workspace has
// them, else post and update; update: always post and update; off: post
// answers whole) and SLACK_STREAM_INTERVAL (the least time between two
// changes of a growing answer, default 1s) say. It returns the agent's
// hook, which reports to *svc once it is set, or nil when answers are not
// streamed (other front ends, or off).
func streaming(getenv func(string) string, rep runner.Reporter, svc **runner.Service) (func(context.Context, *agent.State, agent.Stream), error) {
	slackRep, ok := rep.(*handlers.Reporter)
	if !ok {
		return nil, nil
	}
	opts := handlers.StreamOptions{}
	switch mode := strings.ToLower(getenv("SLACK_STREAMING")); mode {
	case "", "auto":
	case "update":
		opts.UpdateOnly = true
	case "off":
		return nil, nil
	default:
		return nil, fmt.Errorf("SLACK_STREAMING=%q: want auto, update or off", mode)
	}
	if v := getenv("SLACK_STREAM_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("SLACK_STREAM_INTERVAL=%q: want a positive duration such as 1s", v)
		}
		opts.Interval = d
	}
	slackRep.SetStreaming(opts)
	return func(ctx context.Context, s *agent.State, st agent.Stream) { (*svc).OnStream(ctx, s, st) }, nil
}
