package slacksim

import (
	"encoding/json"
	"slices"
	"strings"
)

// Streaming messages, as Slack answers them: chat.startStream posts a
// bot reply in a thread with markdown_text as its first text,
// chat.appendStream adds to it, chat.stopStream ends it (adding
// markdown_text if given); chat.update changes it only once it is
// stopped. assistant.threads.setStatus is answered ok: the playground's
// channel is no assistant thread, so nothing is shown. The page is told
// of every change, so a streamed answer grows in front of the person, with
// a cursor while it streams. Chunks may come instead of markdown_text:
// markdown_text chunks add to the text, and each task (task_update
// chunks) is shown as a line under it, with its latest status and
// details.

// startStream posts a streamed bot message; s.mu is held.
func (s *Simulator) startStream(p params) map[string]any {
	if p["thread_ts"] == "" {
		return fail("invalid_thread_ts")
	}
	text, tasks, err := streamChunks(p)
	if err != nil {
		return fail("invalid_chunks")
	}
	q := params{"channel": p["channel"], "thread_ts": p["thread_ts"], "text": text}
	if q["text"] == "" {
		q["text"] = " "
	}
	res := s.postMessage(q)
	if ts, ok := res["ts"].(string); ok {
		m := s.byTS[ts]
		m.markdown, m.Streaming = text, true
		m.addTasks(tasks)
		s.publish("message", *m)
	}
	return res
}

// streamTask is a task of a streamed message, as its latest
// task_update chunk says.
type streamTask struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Status  string `json:"status"`
	Details string `json:"details"`
}

// streamChunks reads the text and the tasks a streaming call adds.
func streamChunks(p params) (text string, tasks []streamTask, err error) {
	text = p["markdown_text"]
	if p["chunks"] == "" {
		return text, nil, nil
	}
	var chunks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
		streamTask
	}
	if err := json.Unmarshal([]byte(p["chunks"]), &chunks); err != nil {
		return "", nil, err
	}
	for _, c := range chunks {
		switch c.Type {
		case "markdown_text":
			text += c.Text
		case "task_update":
			tasks = append(tasks, c.streamTask)
		}
	}
	return text, tasks, nil
}

// addTasks records task updates and shows the text with a line per task.
func (m *Message) addTasks(updates []streamTask) {
	for _, u := range updates {
		i := slices.IndexFunc(m.tasks, func(t streamTask) bool { return t.ID == u.ID })
		if i < 0 {
			m.tasks = append(m.tasks, u)
		} else {
			m.tasks[i] = u
		}
	}
	m.Text = m.markdown
	for _, t := range m.tasks {
		icon := map[string]string{"complete": "✅", "error": "❌", "pending": "⏸️"}[t.Status]
		if icon == "" {
			icon = "⏳"
		}
		line := icon + " " + t.Title
		if t.Details != "" {
			line += " — " + t.Details
		}
		m.Text = strings.TrimPrefix(m.Text+"\n"+line, "\n")
	}
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
	}
	text, tasks, err := streamChunks(p)
	switch {
	case err != nil:
		return fail("invalid_chunks")
	case !stop && text == "" && len(tasks) == 0:
		return fail("no_text")
	}
	m.markdown += text
	m.addTasks(tasks)
	m.Streaming = !stop
	m.Updated++
	s.publish("message", *m)
	return ok(map[string]any{"channel": s.opts.ChannelID, "ts": m.TS})
}
