package mcp

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
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
// An embedded resource whose blob is an image (a server that returns a
// screenshot or a chart as a resource, not as image content) is one too.
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
		if img, label, ok := imageOf(c); ok {
			line, shown := imageLine(label, img, total)
			parts = append(parts, line)
			at += len(line)
			if shown {
				images = append(images, img)
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

// imageOf returns the image that c is, if it is one, and how its line
// names it: image content ("image image/png"), or an embedded resource
// whose blob says it is an image ("resource file:///chart.png,
// image/png"). Whether the data is what its type says is for
// tools.CheckImage.
func imageOf(c sdk.Content) (img tools.Image, label string, ok bool) {
	switch c := c.(type) {
	case *sdk.ImageContent:
		return tools.Image{MIME: c.MIMEType, Data: c.Data}, "image " + c.MIMEType, true
	case *sdk.EmbeddedResource:
		r := c.Resource
		if r == nil || r.Text != "" || len(r.Blob) == 0 || !strings.HasPrefix(r.MIMEType, "image/") {
			return tools.Image{}, "", false
		}
		return tools.Image{MIME: r.MIMEType, Data: r.Blob}, "resource " + lineURI(r.URI) + ", " + r.MIMEType, true
	}
	return tools.Image{}, "", false
}

// lineURI is a resource's URI as a line of a result names it: as the
// server sent it when it is plain, else quoted, so that no URI (a
// hostile server's) breaks the line or makes one up.
func lineURI(uri string) string {
	if strings.IndexFunc(uri, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) || r == ']' || r == '[' }) < 0 {
		return uri
	}
	return strconv.QuoteToASCII(uri)
}

// imageLine is the line that stands for an image in a result's text, and
// whether the model is shown the image itself: the result's images so
// far take shown bytes.
func imageLine(label string, img tools.Image, shown int) (string, bool) {
	why := tools.CheckImage(img.MIME, img.Data)
	if why == "" && shown+len(img.Data) > tools.MaxResultImageBytes {
		why = fmt.Sprintf("over the %s of images one result shows the model", tools.Size(tools.MaxResultImageBytes))
	}
	if why != "" {
		return fmt.Sprintf("[%s, %s: %s]", label, tools.Size(len(img.Data)), why), false
	}
	return fmt.Sprintf("[%s, %s]", label, tools.Size(len(img.Data))), true
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
