package llm

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/jsonform"
)

// storedMessages are messages as a conversation stores them.
var storedMessages = []string{
	`{"role":"user","content":"turn 7: is status.example.com healthy?"}`,
	`{"role":"assistant","tool_calls":[{"id":"call_7","name":"http_request","arguments":"{\"method\":\"GET\",\"url\":\"https://status.example.com/health\"}"}]}`,
	`{"role":"tool","content":"200 OK\n{\"status\":\"healthy\"}","tool_call_id":"call_7","name":"http_request"}`,
	`{"role":"tool","content":"Error: refused","tool_call_id":"call_8","name":"deploy","is_error":true}`,
	`{"role":"assistant","content":"Re \"turn 7\": healthy (GET /health -\u003e 200) \u0026 \u2028 done.","stop":"length"}`,
	`{"role":"assistant","tool_calls":[{"id":"a","name":"x","arguments":"{","truncated":true},{"id":"b","name":"y","arguments":""}]}`,
	`{"role":"assistant","tool_calls":[]}`,
	`{"role":"assistant","content":"Checking.","tool_calls":[{"id":"toolu_1","name":"http_request","arguments":"{}"}],"thinking":[{"type":"thinking","thinking":"The user wants \u003cstatus\u003e.\n","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4a"}]}`,
	`{"role":"assistant","thinking":[]}`,
	`{}`,
}

// FuzzDecodeMessage: whatever the bytes, DecodeMessage returns what
// json.Unmarshal does, error or message, and so does DecodeJSON into a
// message that held another; and a message encoded by
// encoding/json decodes to itself.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range storedMessages {
		f.Add([]byte(s), "", "")
	}
	f.Add([]byte(`{"Role":"user","role":"tool"}`), "a\x00b", "\xff")
	f.Add([]byte(`{"role":null,"content":"\ud83d\ude00"}`), "\u2028<&>", `"\`)
	f.Add([]byte(`{"role":"user"} x`), "", "")
	f.Add([]byte(`{"role":"assistant","thinking":[{"type":"thinking","thinking":"a","thinking":"b"}]}`), "", "")
	f.Add([]byte(`{"role":"assistant","thinking":null}`), "", "")
	f.Add([]byte(`{"role":"assistant","thinking":[{"type":"thinking","extra":1}]}`), "", "")
	f.Fuzz(func(t *testing.T, data []byte, content, args string) {
		got, err := DecodeMessage(data)
		var want Message
		wantErr := json.Unmarshal(data, &want)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("DecodeMessage(%q) error %v, json.Unmarshal's %v", data, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeMessage(%q) = %#v, json.Unmarshal gives %#v", data, got, want)
		}
		// DecodeJSON into a message that held another leaves nothing of it.
		into := Message{Role: RoleTool, Content: "before", ToolCalls: []ToolCall{{ID: "x"}}, IsError: true, Stop: StopCutOff}
		if err := into.DecodeJSON(data); (err == nil) != (wantErr == nil) || err == nil && !reflect.DeepEqual(into, want) {
			t.Fatalf("DecodeJSON(%q) over another message = %#v, %v; json.Unmarshal gives %#v, %v", data, into, err, want, wantErr)
		}
		m := Message{Role: RoleAssistant, Content: content, Name: args, IsError: len(args)%2 == 1,
			ToolCalls: []ToolCall{{ID: content, Name: "t", Arguments: args, Truncated: len(content)%2 == 1}},
			Thinking:  []Thinking{{Type: ThinkingBlock, Text: content, Signature: args}, {Type: RedactedThinkingBlock, Data: args}}}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back Message
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeMessage(b); err != nil || !reflect.DeepEqual(got, back) {
			t.Fatalf("DecodeMessage(%s) = %#v, %v; want %#v", b, got, err, back)
		}
	})
}

// The stored forms are read without encoding/json, and read as it reads
// them.
func TestDecodeMessageReadsStoredForms(t *testing.T) {
	for _, s := range storedMessages {
		var m Message
		d := decoder{jsonform.NewReader([]byte(s))}
		if !d.message(&m) {
			t.Errorf("%s went to encoding/json", s)
		}
		var want Message
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, want) {
			t.Errorf("%s read as %#v, want %#v", s, m, want)
		}
	}
	for _, s := range []string{
		`{"Role":"user"}`, `{"role":"user","role":"tool"}`, `{"role":null}`, `{"content":"\ud83d\ude00"}`,
		`{"content":"` + "\xff" + `"}`, `{"role":"user"} x`, `{"role":"user",}`, `{"extra":1}`,
	} {
		var m Message
		d := decoder{jsonform.NewReader([]byte(s))}
		if d.message(&m) {
			t.Errorf("%s was read directly; it is encoding/json's to read", s)
		}
	}
}

func BenchmarkDecodeMessage(b *testing.B) {
	msgs := make([][]byte, 0, 400)
	for len(msgs) < 400 {
		for _, s := range storedMessages[:5] {
			msgs = append(msgs, []byte(strings.Replace(s, "7", "123", -1)))
		}
	}
	b.Run("DecodeMessage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, m := range msgs {
				if _, err := DecodeMessage(m); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, m := range msgs {
				var out Message
				if err := json.Unmarshal(m, &out); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
