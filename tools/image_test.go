package tools_test

import (
	"bytes"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/tools"
)

// encoded is a w×h image in the format of mime.
func encoded(t testing.TB, mime string, w, h int) []byte {
	t.Helper()
	img := image.NewPaletted(image.Rect(0, 0, w, h), color.Palette{color.Black, color.White})
	var b bytes.Buffer
	var err error
	switch mime {
	case "image/png":
		err = png.Encode(&b, img)
	case "image/jpeg":
		err = jpeg.Encode(&b, img, nil)
	case "image/gif":
		err = gif.Encode(&b, img, nil)
	case "image/webp":
		return []byte(webp1x1)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// webp1x1 is a lossless WebP image of one pixel.
const webp1x1 = "RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00"

// webpX is the start of an extended WebP image of w×h pixels.
func webpX(w, h int) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x00\x00\x00\x00")
	w, h = w-1, h-1
	return append(b, byte(w), byte(w>>8), byte(w>>16), byte(h), byte(h>>8), byte(h>>16))
}

var imageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// An image is shown to the model only if it is of a type every provider
// takes, within the caps, and its bytes are an image of the type it
// claims: a server that calls anything else an image/png does not get
// it sent, nor one the providers refuse.
func TestCheckImage(t *testing.T) {
	for _, mime := range imageTypes {
		data := encoded(t, mime, 3, 2)
		if why := tools.CheckImage(mime, data); why != "" {
			t.Errorf("%s: %q, want it shown", mime, why)
		}
		for _, other := range imageTypes {
			if other != mime && tools.CheckImage(other, data) == "" {
				t.Errorf("a %s said to be %s is shown", mime, other)
			}
		}
	}
	pngData := encoded(t, "image/png", 3, 2)
	for _, tt := range []struct {
		name string
		mime string
		data []byte
		why  string
	}{
		{"another type", "image/svg+xml", []byte("<svg/>"), "PNG, JPEG, GIF and WebP images only"},
		{"a type spelt otherwise", "IMAGE/PNG", pngData, "PNG, JPEG, GIF and WebP images only"},
		{"no data", "image/png", nil, "the data is not a PNG image"},
		{"over the cap", "image/png", append(pngData, make([]byte, tools.MaxImageBytes)...), "over the 1 MiB the model is shown"},
		{"a PNG's signature, then nonsense", "image/png", append([]byte("\x89PNG\r\n\x1a\n"), "IHDR and so on"...), "the data is not a valid PNG image"},
		{"a header cut short", "image/gif", encoded(t, "image/gif", 3, 2)[:8], "the data is not a valid GIF image"},
		{"too tall", "image/png", encoded(t, "image/png", 1, tools.MaxImageSide+1), "1×8001 pixels, over the 8000 a side"},
		{"too wide", "image/webp", webpX(9000, 10), "9000×10 pixels, over the 8000 a side"},
		{"a WebP without its VP8 chunk", "image/webp", []byte("RIFF\x24\x00\x00\x00WEBPXXXX and more and more and more"), "the data is not a WebP image"},
		{"a WebP chunk cut short", "image/webp", []byte(webp1x1[:24]), "the data is not a valid WebP image"},
	} {
		if why := tools.CheckImage(tt.mime, tt.data); !strings.Contains(why, tt.why) {
			t.Errorf("%s: CheckImage(%s, %d bytes) = %q, want %q", tt.name, tt.mime, len(tt.data), why, tt.why)
		}
	}
	if why := tools.CheckImage("image/webp", webpX(tools.MaxImageSide, 1)); why != "" {
		t.Errorf("a WebP of 8000×1 pixels: %q, want it shown", why)
	}
}

// FuzzCheckImage: whatever a server sends, an image CheckImage lets
// through is one the standard library's sniffer takes for the type it
// claims, within the cap.
func FuzzCheckImage(f *testing.F) {
	for _, mime := range imageTypes {
		data := encoded(f, mime, 2, 2)
		f.Add(mime, data)
		f.Add(mime, data[:len(data)/2])
	}
	f.Add("image/webp", webpX(100, 100))
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
