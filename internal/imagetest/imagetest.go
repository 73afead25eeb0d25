// Package imagetest makes small, real images for tests: PNGs that the
// bot's image checks (tools.CheckImage) and the provider fakes, which
// decode what they are sent, take. It is for tests only.
package imagetest

import (
	"bytes"
	"image"
	"image/png"
)

// PNG is a side×side PNG whose pixels follow from seed: two calls with
// the same arguments give the same bytes, and images of one size but
// another seed differ.
func PNG(side int, seed byte) []byte {
	img := image.NewRGBA(image.Rect(0, 0, side, side))
	for i := range img.Pix {
		img.Pix[i] = byte(i*7) + seed
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err) // an in-memory RGBA image always encodes
	}
	return b.Bytes()
}
