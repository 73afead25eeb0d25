package llm_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/countersign/countersign/llm"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// goldenConversation has every field of Message and ToolCall set
// somewhere. Checkpoints store exactly this JSON: if the golden file
// changes, paused threads saved by older versions may no longer resume.
var goldenConversation = []llm.Message{
	{Role: llm.RoleSystem, Content: "You are Countersign."},
	{Role: llm.RoleUser, Content: "Check https://a.example and post to https://b.example <&>"},
	{Role: llm.RoleAssistant, Content: "Checking both.", ToolCalls: []llm.ToolCall{
		{ID: "call_a", Name: "http_request", Arguments: `{"method":"GET","url":"https://a.example"}`},
		{ID: "call_b", Name: "http_request", Arguments: `{"method":"POST", "url":"https://b.example", "body":"{\"n\":1}"}`},
	}},
	{Role: llm.RoleTool, ToolCallID: "call_a", Name: "http_request", Content: "HTTP 200 OK\n\nhello"},
	{Role: llm.RoleTool, ToolCallID: "call_b", Name: "http_request", Content: "Rejected by <@U1>: not now", IsError: true},
	{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_c", Name: "http_request", Arguments: `{"url": broken`}}},
	{Role: llm.RoleAssistant, Content: "a fetched; b was rejected."},
}

func TestMessageJSONGolden(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", "conversation.golden.json")
	got, err := json.MarshalIndent(goldenConversation, "", "  ")
	if err != nil {
		t.Fatalf("json.MarshalIndent() error = %v", err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("JSON of the conversation =\n%s\nwant (%s)\n%s", got, path, want)
	}

	// What the golden file holds decodes to the same messages, and
	// encodes to the same bytes again.
	var decoded []llm.Message
	if err := json.Unmarshal(want, &decoded); err != nil {
		t.Fatalf("json.Unmarshal(golden) error = %v", err)
	}
	if !reflect.DeepEqual(decoded, goldenConversation) {
		t.Errorf("json.Unmarshal(golden) =\n%+v\nwant\n%+v", decoded, goldenConversation)
	}
	again, err := json.MarshalIndent(decoded, "", "  ")
	if err != nil {
		t.Fatalf("json.MarshalIndent() error = %v", err)
	}
	if !bytes.Equal(append(again, '\n'), want) {
		t.Errorf("re-encoded golden conversation differs:\n%s", again)
	}
}

func TestToolCallUnmarshalsOnItsOwn(t *testing.T) {
	t.Parallel()
	// langchaingo's ToolCall loses its function when decoded on its own;
	// ours keeps every field.
	want := llm.ToolCall{ID: "call_1", Name: "http_request", Arguments: `{"url":"https://a.example"}`}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got llm.ToolCall
	if err := json.Unmarshal(b, &got); err != nil || got != want {
		t.Errorf("json.Unmarshal(%s) = %+v, %v; want %+v", b, got, err, want)
	}
}
