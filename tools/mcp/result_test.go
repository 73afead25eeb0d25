package mcp

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/imagetest"
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
		got, _, _ := allContent(&sdk.CallToolResult{Content: tt.content, StructuredContent: tt.structured}, "")
		if got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A result cut to its cap keeps the images whose lines it keeps, and
// only those: the model is not shown an image the text does not place.
func TestCutResultKeepsTheImagesItPlaces(t *testing.T) {
	png := func(seed byte) *sdk.ImageContent {
		return &sdk.ImageContent{MIMEType: "image/png", Data: imagetest.PNG(1, seed)}
	}
	line := fmt.Sprintf("[image image/png, %d bytes]", len(png(1).Data))
	const max = 200
	res := &sdk.CallToolResult{Content: []sdk.Content{
		png(1),
		&sdk.TextContent{Text: strings.Repeat("x", max-40)},
		png(2), // its line ends past the cut
		&sdk.TextContent{Text: strings.Repeat("y", max)},
		png(3),
	}}
	text, images := resultContent(res, max, "")
	if len(images) != 1 || !bytes.Equal(images[0].Data, png(1).Data) {
		t.Fatalf("%d images kept, want the first only; text:\n%s", len(images), text)
	}
	if !strings.HasPrefix(text, line+"\n") || !strings.Contains(text, "more bytes not shown]") {
		t.Errorf("text = %q; want the first image's line, then the cut", text)
	}
	// Uncut, every image and line is there, each line where the text has it.
	full, all := resultContent(res, 1<<20, "")
	if len(all) != 3 || strings.Count(full, line) != 3 {
		t.Errorf("uncut: %d images, text %q; want all three", len(all), full)
	}
	for cut := 1; cut < len(full); cut += 7 {
		text, images := resultContent(res, cut, "")
		if n := strings.Count(text, line); n != len(images) {
			t.Fatalf("cut at %d: %d images for %d whole lines", cut, len(images), n)
		}
	}
}
