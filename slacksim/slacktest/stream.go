package slacktest

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Streaming messages and assistant-thread status, as Slack answers them:
//
//   - chat.startStream posts a new message in a thread (thread_ts is
//     required) with markdown_text as its first text, and answers its ts;
//   - chat.appendStream adds markdown_text to a message that is streaming;
//   - chat.stopStream ends the stream, adding markdown_text if given;
//     only then can chat.update change the message;
//   - each of them takes chunks instead of (or beside) markdown_text:
//     markdown_text chunks add to the text, task_update chunks are
//     recorded in order (Tasks);
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
		chunks, err := parseChunks(params["chunks"])
		call.Text = params["markdown_text"] + chunks.text
		switch {
		case err != nil:
			return errReply("invalid_chunks"), true
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
		s.tasks[call.Channel+"/"+call.TS] = chunks.tasks
		return okReply(map[string]any{"channel": call.Channel, "ts": call.TS}), true
	case "chat.appendStream", "chat.stopStream":
		chunks, err := parseChunks(params["chunks"])
		call.Text = params["markdown_text"] + chunks.text
		key := call.Channel + "/" + call.TS
		msg, found := s.messages[key]
		switch {
		case err != nil:
			return errReply("invalid_chunks"), true
		case call.Channel == "":
			return errReply("channel_not_found"), true
		case !found:
			return errReply("message_not_found"), true
		case !s.streaming[key]:
			return errReply("message_not_in_streaming_state"), true
		case call.Method == "chat.appendStream" && call.Text == "" && len(chunks.tasks) == 0:
			return errReply("no_text"), true
		}
		msg.Text += call.Text
		s.tasks[key] = append(s.tasks[key], chunks.tasks...)
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

// TaskUpdate is a task_update chunk of a streamed message.
type TaskUpdate struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Status  string `json:"status"`
	Details string `json:"details"`
	Output  string `json:"output"`
}

// Tasks are the task updates the streamed message at channel and ts
// received, in order.
func (s *Server) Tasks(channel, ts string) []TaskUpdate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tasks[channel+"/"+ts])
}

// streamChunks are what the chunks of one call add to a streamed
// message.
type streamChunks struct {
	text  string
	tasks []TaskUpdate
}

// parseChunks reads a chunks parameter: a JSON array of typed chunks.
func parseChunks(raw string) (streamChunks, error) {
	var out streamChunks
	if raw == "" {
		return out, nil
	}
	var chunks []json.RawMessage
	if err := json.Unmarshal([]byte(raw), &chunks); err != nil {
		return out, err
	}
	for _, c := range chunks {
		var head struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(c, &head); err != nil {
			return out, err
		}
		switch head.Type {
		case "markdown_text":
			out.text += head.Text
		case "task_update":
			var t TaskUpdate
			if err := json.Unmarshal(c, &t); err != nil || t.ID == "" || t.Title == "" {
				return out, fmt.Errorf("task_update without id or title")
			}
			out.tasks = append(out.tasks, t)
		case "plan_update", "blocks":
		default:
			return out, fmt.Errorf("unknown chunk type %q", head.Type)
		}
	}
	return out, nil
}
