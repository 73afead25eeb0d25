package handlers

import (
	"encoding/json"
	"testing"
)

// Which messages are requests: people's replies, also those sent to the
// channel too or with files; never the bot's own, a bot's, an edit, a
// deletion or a join, whatever files they claim to carry.
func TestRequestSubtypes(t *testing.T) {
	t.Parallel()
	s := &Server{opts: Options{BotUserID: "U0BOT"}}
	files := json.RawMessage(`[{"id":"F1","name":"shot.png","mimetype":"image/png","url_private":"https://files.slack.com/x"}]`)
	reply := func(subtype, user, botID string) messageEvent {
		return messageEvent{Type: "message", Subtype: subtype, User: user, BotID: botID, Text: "why?", Channel: "C1",
			TS: "2.0", ThreadTS: "1.0", Files: files}
	}
	tests := []struct {
		name string
		ev   messageEvent
		want bool
	}{
		{"plain reply", reply("", "U1", ""), true},
		{"also sent to the channel", reply("thread_broadcast", "U1", ""), true},
		{"with files", reply("file_share", "U1", ""), true},
		{"an edit", reply("message_changed", "U1", ""), false},
		{"a deletion", reply("message_deleted", "U1", ""), false},
		{"a join", reply("channel_join", "U1", ""), false},
		{"a bot's message", reply("bot_message", "", "B1"), false},
		{"a bot's files", reply("file_share", "U2", "B1"), false},
		{"the bot's own files", reply("file_share", "U0BOT", ""), false},
		{"a broadcast that mentions the bot (its app_mention is the request)",
			messageEvent{Type: "message", Subtype: "thread_broadcast", User: "U1", Text: "<@U0BOT> hi", Channel: "C1", TS: "2.0", ThreadTS: "1.0"}, false},
		{"a mention with files", messageEvent{Type: "app_mention", User: "U1", Text: "<@U0BOT>", Channel: "C1", TS: "2.0", Files: files}, true},
	}
	for _, tt := range tests {
		rec, ok := s.request("T1", tt.ev)
		if ok != tt.want {
			t.Errorf("%s: request() = %v, want %v", tt.name, ok, tt.want)
		}
		if ok && (len(rec.Files) != 1 || rec.Files[0].Name != "shot.png") {
			t.Errorf("%s: request() files = %+v, want the one file", tt.name, rec.Files)
		}
	}
}

// A files list that is not one leaves the message a request without
// files, never a malformed event.
func TestRequestOddFiles(t *testing.T) {
	t.Parallel()
	s := &Server{opts: Options{BotUserID: "U0BOT"}}
	for _, raw := range []string{`"x"`, `{"id":1}`, `[1,"a",null]`, `null`} {
		ev := messageEvent{Type: "message", Subtype: "file_share", User: "U1", Text: "hi", Channel: "C1", TS: "2.0", ThreadTS: "1.0", Files: json.RawMessage(raw)}
		rec, ok := s.request("T1", ev)
		if !ok || len(rec.Files) != 0 {
			t.Errorf("files %s: request() = %v with %d files, want a request without files", raw, ok, len(rec.Files))
		}
	}
}
