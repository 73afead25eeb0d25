package llmtest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	_ "image/gif" // image.Decode reads the images a request sends
	_ "image/jpeg"
	_ "image/png"
	"strings"

	"github.com/countersign/countersign/llm"
)

// checkImage says what the providers answer about an image of this type
// and base64 data, or "" if they take it: PNG, JPEG, GIF or WebP, in
// valid base64, whose bytes are of the type it is sent as.
func checkImage(mime, data string) (llm.Image, string) {
	magic, ok := imageMagic[mime]
	if !ok {
		return llm.Image{}, fmt.Sprintf("Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp', not %q", mime)
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return llm.Image{}, "The image data is not valid base64"
	}
	if !magic(b) {
		return llm.Image{}, fmt.Sprintf("Image does not match the provided media type %s", mime)
	}
	// The providers decode what they are sent: an image whose first
	// bytes and header are right but whose data is broken is refused
	// too. (Go has no WebP decoder: a WebP is taken by its first bytes.)
	if mime != "image/webp" {
		if _, _, err := image.Decode(bytes.NewReader(b)); err != nil {
			return llm.Image{}, "Could not process image"
		}
	}
	return llm.Image{MIME: mime, Data: b}, ""
}

var imageMagic = map[string]func([]byte) bool{
	"image/png":  func(b []byte) bool { return bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) },
	"image/jpeg": func(b []byte) bool { return bytes.HasPrefix(b, []byte("\xff\xd8\xff")) },
	"image/gif":  func(b []byte) bool { return bytes.HasPrefix(b, []byte("GIF8")) },
	"image/webp": func(b []byte) bool { return len(b) >= 15 && string(b[:4]) == "RIFF" && string(b[8:15]) == "WEBPVP8" },
}

// dataURLImage reads a data: URL of a base64 image.
func dataURLImage(url string) (llm.Image, string) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		return llm.Image{}, "this server takes images as data: URLs only"
	}
	mime, data, ok := strings.Cut(rest, ";base64,")
	if !ok {
		return llm.Image{}, "Invalid image URL: expected a base64-encoded data URL"
	}
	return checkImage(mime, data)
}
