package slacktest

// Streaming messages and assistant-thread status, as Slack answers them:
//
//   - chat.startStream posts a new message in a thread (thread_ts is
//     required) with markdown_text as its first text, and answers its ts;
//   - chat.appendStream adds markdown_text to a message that is streaming;
//   - chat.stopStream ends the stream, adding markdown_text if given;
//     only then can chat.update change the message;
//   - assistant.threads.setStatus (channel_id, thread_ts, status) is
//     answered ok and recorded.
//
// A workspace without streaming is simulated with FailNext(
// "chat.startStream", "unknown_method", n); a chat.startStream answered
// ok but without a ts with StartStreamWithoutTS.

// answerStream answers the streaming methods; s.mu is held. ok is false
// for other methods.
func (s *Server) answerStream(call *Call) (rep reply, ok bool) {
	params := call.Params
	switch call.Method {
	case "chat.startStream":
		call.Text = params["markdown_text"]
		switch {
		case call.Channel == "":
			return errReply("channel_not_found"), true
		case call.ThreadTS == "":
			return errReply("invalid_thread_ts"), true
		}
		if s.streamsWithoutTS > 0 {
			s.streamsWithoutTS--
			return okReply(map[string]any{"channel": call.Channel}), true
		}
		call.TS = s.nextTS()
		s.messages[call.Channel+"/"+call.TS] = *call
		s.streaming[call.Channel+"/"+call.TS] = true
		return okReply(map[string]any{"channel": call.Channel, "ts": call.TS}), true
	case "chat.appendStream", "chat.stopStream":
		call.Text = params["markdown_text"]
		key := call.Channel + "/" + call.TS
		msg, found := s.messages[key]
		switch {
		case call.Channel == "":
			return errReply("channel_not_found"), true
		case !found:
			return errReply("message_not_found"), true
		case !s.streaming[key]:
			return errReply("message_not_in_streaming_state"), true
		case call.Method == "chat.appendStream" && call.Text == "":
			return errReply("no_text"), true
		}
		msg.Text += call.Text
		s.messages[key] = msg
		if call.Method == "chat.stopStream" {
			delete(s.streaming, key)
		}
		return okReply(map[string]any{"channel": call.Channel, "ts": call.TS}), true
	case "assistant.threads.setStatus":
		call.Channel, call.Text = params["channel_id"], params["status"]
		if call.Channel == "" || call.ThreadTS == "" {
			return errReply("invalid_arguments"), true
		}
		return okReply(nil), true
	}
	return reply{}, false
}

// StartStreamWithoutTS answers the next n calls to chat.startStream with
// ok but no ts, and starts no stream for them: a caller has no message to
// append to or stop.
func (s *Server) StartStreamWithoutTS(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streamsWithoutTS = n
}

// Streaming reports whether the message at channel and ts is a streamed
// message whose stream has not been stopped.
func (s *Server) Streaming(channel, ts string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streaming[channel+"/"+ts]
}

// isPosted reports whether a call made a new message.
func isPosted(c Call) bool {
	return c.OK() && c.TS != "" && (c.Method == "chat.postMessage" || c.Method == "chat.startStream")
}

// streamedText is a streamed message's latest text; s.mu is held.
func (s *Server) streamedText(c Call) string {
	if m, ok := s.messages[c.Channel+"/"+c.TS]; ok && c.Method == "chat.startStream" {
		return m.Text
	}
	return c.Text
}
