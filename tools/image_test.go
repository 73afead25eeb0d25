package tools_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/tools"
)

// The first bytes of a file of each type, as real files start.
var imageStarts = map[string]string{
	"image/png":  "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
	"image/jpeg": "\xff\xd8\xff\xe0\x00\x10JFIF\x00",
	"image/gif":  "GIF89a\x01\x00\x01\x00",
	"image/webp": "RIFF\x24\x00\x00\x00WEBPVP8 ",
}

// An image is shown to the model only if it is of a type every provider
// takes, within the cap, and its bytes are of the type it claims: a
// server that calls anything else an image/png does not get it sent.
func TestCheckImage(t *testing.T) {
	for mime, start := range imageStarts {
		if why := tools.CheckImage(mime, []byte(start)); why != "" {
			t.Errorf("%s: %q, want it shown", mime, why)
		}
		for other, otherStart := range imageStarts {
			if other != mime && tools.CheckImage(mime, []byte(otherStart)) == "" {
				t.Errorf("a %s said to be %s is shown", other, mime)
			}
		}
	}
	for _, tt := range []struct {
		mime string
		data []byte
		why  string
	}{
		{"image/svg+xml", []byte("<svg/>"), "PNG, JPEG, GIF and WebP images only"},
		{"IMAGE/PNG", []byte(imageStarts["image/png"]), "PNG, JPEG, GIF and WebP images only"},
		{"image/png", nil, "the data is not a PNG image"},
		{"image/png", append([]byte(imageStarts["image/png"]), make([]byte, tools.MaxImageBytes)...), "over the 1 MiB the model is shown"},
		{"image/webp", []byte("RIFF\x24\x00\x00\x00WEBPXXXX"), "the data is not a WebP image"},
	} {
		if why := tools.CheckImage(tt.mime, tt.data); !strings.Contains(why, tt.why) {
			t.Errorf("CheckImage(%s, %d bytes) = %q, want %q", tt.mime, len(tt.data), why, tt.why)
		}
	}
}

// FuzzCheckImage: whatever a server sends, an image CheckImage lets
// through is one the standard library's sniffer takes for the type it
// claims, within the cap.
func FuzzCheckImage(f *testing.F) {
	for mime, start := range imageStarts {
		f.Add(mime, []byte(start))
		f.Add(mime, []byte(start[:len(start)/2]))
	}
	f.Add("image/png", []byte("GIF89a"))
	f.Add("text/html", []byte("<html>"))
	f.Fuzz(func(t *testing.T, mime string, data []byte) {
		why := tools.CheckImage(mime, data)
		if why != "" {
			return
		}
		if got := http.DetectContentType(data); got != mime {
			t.Errorf("CheckImage(%q, %q) shows it; the sniffer says %s", mime, data, got)
		}
		if len(data) > tools.MaxImageBytes {
			t.Errorf("an image of %d bytes is shown", len(data))
		}
	})
}
