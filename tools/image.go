package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
)

// Image is an image in a tool's result, for the model to look at: a
// screenshot, a chart, a picture read from a file. People are shown the
// result's text only, where a line stands for the image.
type Image struct {
	// MIME is one of ImageTypes.
	MIME string `json:"mime"`
	// Data is the image, decoded (base64 in JSON).
	Data []byte `json:"data"`
}

// ImageTool is a Tool whose results may hold images. The agent calls
// CallWithImages instead of CallWithInfo for such a tool; text is what
// CallWithInfo returns (a line for each image included), images the
// images that passed CheckImage and the caps, in the order of the result.
type ImageTool interface {
	InfoTool
	CallWithImages(ctx context.Context, info CallInfo, args json.RawMessage) (text string, images []Image, err error)
}

// The caps on what a tool's result shows the model. An image over
// MaxImageBytes, or one that would take a result's images past
// MaxResultImageBytes, stays a line of text. They keep a checkpoint and
// a model request within bounds, below what the providers take (5 MB an
// image at Anthropic).
const (
	MaxImageBytes       = 1 << 20
	MaxResultImageBytes = 4 << 20
)

// ImageTypes are the image types the model is shown: those every
// provider that takes images takes.
var ImageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// CheckImage says why an image of this type and data is not shown to the
// model, or "" if it may be: its type must be one of ImageTypes, its size
// within MaxImageBytes, and its first bytes those of its type. A server
// that calls something else an image/png would otherwise have the
// provider refuse every later request of the conversation.
func CheckImage(mime string, data []byte) string {
	want, ok := imageMagic[mime]
	switch {
	case !ok:
		return "the model is shown PNG, JPEG, GIF and WebP images only"
	case len(data) > MaxImageBytes:
		return fmt.Sprintf("over the %s the model is shown", Size(MaxImageBytes))
	case !want(data):
		return fmt.Sprintf("the data is not a %s image", imageNames[mime])
	}
	return ""
}

var imageMagic = map[string]func([]byte) bool{
	"image/png":  func(b []byte) bool { return bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) },
	"image/jpeg": func(b []byte) bool { return bytes.HasPrefix(b, []byte("\xff\xd8\xff")) },
	"image/gif": func(b []byte) bool {
		return bytes.HasPrefix(b, []byte("GIF87a")) || bytes.HasPrefix(b, []byte("GIF89a"))
	},
	"image/webp": func(b []byte) bool {
		return len(b) >= 15 && string(b[:4]) == "RIFF" && string(b[8:15]) == "WEBPVP8"
	},
}

var imageNames = map[string]string{"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WebP"}

// Size writes a number of bytes for people: "512 bytes", "34.0 KiB",
// "6.1 MiB".
func Size(n int) string {
	switch {
	case n >= 1<<20:
		if n%(1<<20) == 0 {
			return fmt.Sprintf("%d MiB", n>>20)
		}
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
