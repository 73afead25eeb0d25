package slacksim

// Streaming messages, as Slack answers them: chat.startStream posts a
// bot reply in a thread with markdown_text as its first text,
// chat.appendStream adds to it, chat.stopStream ends it (adding
// markdown_text if given); chat.update changes it only once it is
// stopped. assistant.threads.setStatus is answered ok: the playground's
// channel is no assistant thread, so nothing is shown. The page is told
// of every change, so a streamed answer grows in front of the person, with
// a cursor while it streams.

// startStream posts a streamed bot message; s.mu is held.
func (s *Simulator) startStream(p params) map[string]any {
	if p["thread_ts"] == "" {
		return fail("invalid_thread_ts")
	}
	q := params{"channel": p["channel"], "thread_ts": p["thread_ts"], "text": p["markdown_text"]}
	if q["text"] == "" {
		q["text"] = " "
	}
	res := s.postMessage(q)
	if ts, ok := res["ts"].(string); ok {
		m := s.byTS[ts]
		m.Text, m.Streaming = p["markdown_text"], true
		s.publish("message", *m)
	}
	return res
}

// appendStream adds to a streamed message, and stopStream ends it; s.mu
// is held.
func (s *Simulator) appendStream(p params, stop bool) map[string]any {
	if !s.isChannel(p["channel"]) {
		return fail("channel_not_found")
	}
	m, found := s.byTS[p["ts"]]
	switch {
	case !found || m.BotID != s.opts.BotID:
		return fail("message_not_found")
	case !m.Streaming:
		return fail("message_not_in_streaming_state")
	case !stop && p["markdown_text"] == "":
		return fail("no_text")
	}
	m.Text += p["markdown_text"]
	m.Streaming = !stop
	m.Updated++
	s.publish("message", *m)
	return ok(map[string]any{"channel": s.opts.ChannelID, "ts": m.TS})
}
