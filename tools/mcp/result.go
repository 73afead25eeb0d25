package mcp

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/tools"
)

// resultContent turns a tool's result into text and images for the
// model: text content as it is, structured content as JSON, and anything
// else (images, audio, resources) summarised by type and size. Images
// the model may be shown (tools.CheckImage, within
// tools.MaxResultImageBytes together) are returned as well, each after
// its line in the text; any other image's line says why it is not shown.
// The text is cut to max bytes as http_request cuts a body
// (tools.CapText), so that no server can bloat a checkpoint or a model
// request. Resources say which tool reads them, if the server has one
// (readTool).
//
// An image whose line the cut leaves out is left out too: the model is
// not shown an image the text does not place.
func resultContent(res *sdk.CallToolResult, max int, readTool string) (string, []tools.Image) {
	text, images, ends := allContent(res, readTool)
	if len(text) > max {
		cut := max // where tools.CapText cuts
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		var kept []tools.Image
		for i, img := range images {
			if ends[i] <= cut {
				kept = append(kept, img)
			}
		}
		images = kept
	}
	return tools.CapText(text, max), images
}

// allContent returns a result's text, its images for the model, and
// where in the text each image's line ends.
func allContent(res *sdk.CallToolResult, readTool string) (string, []tools.Image, []int) {
	var (
		parts  []string
		images []tools.Image
		ends   []int
		total  int
		at     int // the length of the text so far
	)
	for _, c := range res.Content {
		if len(parts) > 0 {
			at++ // the newline between parts
		}
		if img, ok := c.(*sdk.ImageContent); ok {
			line, shown := imageLine(img, total)
			parts = append(parts, line)
			at += len(line)
			if shown {
				images = append(images, tools.Image{MIME: img.MIMEType, Data: img.Data})
				ends = append(ends, at)
				total += len(img.Data)
			}
			continue
		}
		text := contentText(c, readTool)
		parts = append(parts, text)
		at += len(text)
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			parts = append(parts, fmt.Sprintf("[structured content that is not JSON: %v]", err))
		} else if s := string(b); !contains(parts, s) && !containsWrapped(parts, res.StructuredContent) {
			// A server that follows the spec also sends the structured
			// content as text; say it once.
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return "(no content)", nil, nil
	}
	return strings.Join(parts, "\n"), images, ends
}

// imageLine is the line that stands for an image in a result's text, and
// whether the model is shown the image itself: the result's images so
// far take shown bytes.
func imageLine(img *sdk.ImageContent, shown int) (string, bool) {
	why := tools.CheckImage(img.MIMEType, img.Data)
	if why == "" && shown+len(img.Data) > tools.MaxResultImageBytes {
		why = fmt.Sprintf("over the %s of images one result shows the model", tools.Size(tools.MaxResultImageBytes))
	}
	if why != "" {
		return fmt.Sprintf("[image %s, %s: %s]", img.MIMEType, tools.Size(len(img.Data)), why), false
	}
	return fmt.Sprintf("[image %s, %s]", img.MIMEType, tools.Size(len(img.Data))), true
}

// containsWrapped reports whether structured content that is an object of
// one member (structured content must be an object, so servers wrap a
// list or a value: {"entities": [...]}, {"result": ...}) holds the same
// as one of parts: the text content many servers send is the unwrapped
// value.
func containsWrapped(parts []string, structured any) bool {
	var obj map[string]any
	b, err := json.Marshal(structured)
	if err != nil || json.Unmarshal(b, &obj) != nil || len(obj) != 1 {
		return false
	}
	for _, v := range obj {
		if text, ok := v.(string); ok {
			return contains(parts, text)
		}
		inner, err := json.Marshal(v)
		return err == nil && contains(parts, string(inner))
	}
	return false
}

func contains(parts []string, s string) bool {
	for _, p := range parts {
		if strings.TrimSpace(p) == s {
			return true
		}
		var a, b any
		if json.Unmarshal([]byte(p), &a) == nil && json.Unmarshal([]byte(s), &b) == nil {
			x, _ := json.Marshal(a)
			y, _ := json.Marshal(b)
			if string(x) == string(y) {
				return true
			}
		}
	}
	return false
}

func contentText(c sdk.Content, readTool string) string {
	how := ""
	if readTool != "" {
		how = "; read it with " + readTool
	}
	switch c := c.(type) {
	case *sdk.TextContent:
		return c.Text
	case *sdk.ImageContent:
		return fmt.Sprintf("[image %s, %s]", c.MIMEType, tools.Size(len(c.Data)))
	case *sdk.AudioContent:
		return fmt.Sprintf("[audio %s, %s]", c.MIMEType, tools.Size(len(c.Data)))
	case *sdk.ResourceLink:
		return fmt.Sprintf("[resource link %s %q%s]", c.URI, c.Name, how)
	case *sdk.EmbeddedResource:
		if c.Resource == nil {
			return "[embedded resource]"
		}
		if c.Resource.Text != "" {
			return fmt.Sprintf("[resource %s, %s]\n%s", c.Resource.URI, mimeOr(c.Resource.MIMEType, "text"), c.Resource.Text)
		}
		return fmt.Sprintf("[resource %s, %s, %s%s]", c.Resource.URI, mimeOr(c.Resource.MIMEType, "binary"), tools.Size(len(c.Resource.Blob)), how)
	case nil:
		return "[empty content]"
	}
	return fmt.Sprintf("[%T content]", c)
}

func mimeOr(mime, alt string) string {
	if mime == "" {
		return alt
	}
	return mime
}
