package tools

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	_ "image/gif" // image.DecodeConfig reads what CheckImage lets through
	_ "image/jpeg"
	_ "image/png"
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

// MaxImageSide is the most pixels an image shown to the model may have
// on a side: Anthropic refuses a request with a larger image (a tall
// full-page screenshot), and every later request of its conversation.
const MaxImageSide = 8000

// ImageTypes are the image types the model is shown: those every
// provider that takes images takes.
var ImageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// CheckImage says why an image of this type and data is not shown to the
// model, or "" if it may be: its type must be one of ImageTypes, its size
// within MaxImageBytes, its first bytes those of its type, its header
// one that reads as such, and its sides within MaxImageSide. A server
// that calls something else an image/png would otherwise have the
// provider refuse every later request of the conversation. (The pixels
// are not decoded: a header that reads well over data that does not is
// let through.)
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
	w, h, ok := imageSize(mime, data)
	switch {
	case !ok || w <= 0 || h <= 0:
		return fmt.Sprintf("the data is not a valid %s image", imageNames[mime])
	case w > MaxImageSide || h > MaxImageSide:
		return fmt.Sprintf("%d×%d pixels, over the %d a side the model is shown", w, h, MaxImageSide)
	}
	return ""
}

// SniffImage returns the type of ImageTypes whose first bytes data has,
// or "": what an image is, whatever it was said to be.
func SniffImage(data []byte) string {
	for _, mime := range ImageTypes {
		if imageMagic[mime](data) {
			return mime
		}
	}
	return ""
}

// imageSize reads an image's width and height from its header: what
// the providers check before they look at the pixels. The image's type
// is known to be mime by its first bytes.
func imageSize(mime string, data []byte) (w, h int, ok bool) {
	if mime == "image/webp" {
		return webpSize(data)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return 0, 0, false
	}
	return cfg.Width, cfg.Height, true
}

// webpSize reads a WebP image's size from its first chunk (the standard
// library has no WebP decoder): VP8 (lossy), VP8L (lossless) or VP8X
// (extended), as the WebP container specification lays them out.
func webpSize(b []byte) (w, h int, ok bool) {
	if len(b) < 30 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WEBP" {
		return 0, 0, false
	}
	switch string(b[12:16]) {
	case "VP8 ":
		// A key frame: a 3-byte frame tag, the start code, then 14 bits
		// of width and of height.
		if b[20]&1 != 0 || b[23] != 0x9d || b[24] != 0x01 || b[25] != 0x2a {
			return 0, 0, false
		}
		return int(binary.LittleEndian.Uint16(b[26:]) & 0x3fff), int(binary.LittleEndian.Uint16(b[28:]) & 0x3fff), true
	case "VP8L":
		// The signature byte, then 14 bits of width-1 and of height-1.
		if b[20] != 0x2f {
			return 0, 0, false
		}
		bits := binary.LittleEndian.Uint32(b[21:])
		return int(bits&0x3fff) + 1, int(bits>>14&0x3fff) + 1, true
	case "VP8X":
		// Flags and reserved bytes, then 24 bits of width-1 and of
		// height-1.
		w := int(b[24]) | int(b[25])<<8 | int(b[26])<<16
		h := int(b[27]) | int(b[28])<<8 | int(b[29])<<16
		return w + 1, h + 1, true
	}
	return 0, 0, false
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
