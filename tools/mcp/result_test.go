package mcp

import (
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Structured content that repeats the text content is said once, also
// when the server wrapped it in an object of one member (server-memory:
// text [...], structured {"entities": [...]}; FastMCP: {"result": ...});
// structured content that adds something is kept.
func TestStructuredContentSaidOnce(t *testing.T) {
	text := func(s string) []sdk.Content { return []sdk.Content{&sdk.TextContent{Text: s}} }
	for _, tt := range []struct {
		name       string
		content    []sdk.Content
		structured any
		want       string
	}{
		{"the same", text(`{"id": 7}`), map[string]any{"id": 7}, `{"id": 7}`},
		{"wrapped list", text("[\n  {\"name\": \"a\"}\n]"), map[string]any{"entities": []any{map[string]any{"name": "a"}}}, "[\n  {\"name\": \"a\"}\n]"},
		{"wrapped string", text("hello"), map[string]any{"result": "hello"}, "hello"},
		{"more", text("[1]"), map[string]any{"items": []any{1}, "next": "x"}, "[1]\n{\"items\":[1],\"next\":\"x\"}"},
		{"other", text("done"), map[string]any{"id": 7}, "done\n{\"id\":7}"},
		{"only structured", nil, map[string]any{"id": 7}, `{"id":7}`},
	} {
		got := allText(&sdk.CallToolResult{Content: tt.content, StructuredContent: tt.structured}, "")
		if got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
