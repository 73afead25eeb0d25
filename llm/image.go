package llm

import (
	"encoding/base64"
	"fmt"
)

// Image is an image shown to the model: a tool's result's (a
// screenshot, a chart), as the tool gave it, or one a person attached to
// their message: one of PNG, JPEG, GIF and WebP, checked against its
// type's first bytes and capped in size before it gets here (see package
// tools). A tool or user message holds its images besides its text, where
// a line stands for each; people are shown the text only.
type Image struct {
	// MIME is the image's type: image/png, image/jpeg, image/gif or
	// image/webp.
	MIME string `json:"mime"`
	// Data is the image, decoded (base64 in JSON).
	Data []byte `json:"data"`
}

// What one request shows the model of the conversation's images, at
// most: the newest ones, up to MaxRequestImages images and
// MaxRequestImageBytes bytes together. Older ones are left out, their
// line in the result's text standing for them, so that a long thread of
// screenshots does not grow every request past what a provider takes
// (Anthropic: 32 MB a request, 100 images).
const (
	MaxRequestImages     = 20
	MaxRequestImageBytes = 8 << 20
)

// requestImages returns the images of msgs' tool and user messages that
// a request sends, by the index of their message: the newest first,
// within MaxRequestImages and MaxRequestImageBytes. Nil if none.
func requestImages(msgs []Message) map[int][]Image {
	var (
		out          map[int][]Image
		count, bytes int
	)
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if (m.Role != RoleTool && m.Role != RoleUser) || len(m.Images) == 0 {
			continue
		}
		var kept []Image
		for j := len(m.Images) - 1; j >= 0; j-- {
			img := m.Images[j]
			if count == MaxRequestImages || bytes+len(img.Data) > MaxRequestImageBytes {
				break
			}
			kept = append(kept, img)
			count, bytes = count+1, bytes+len(img.Data)
		}
		if len(kept) == 0 {
			break
		}
		// The message's first images are the ones left out, if any.
		for a, b := 0, len(kept)-1; a < b; a, b = a+1, b-1 {
			kept[a], kept[b] = kept[b], kept[a]
		}
		if out == nil {
			out = map[int][]Image{}
		}
		out[i] = kept
		if len(kept) < len(m.Images) {
			break
		}
	}
	return out
}

// imagesIntro introduces, in a user message, the n images of the result
// of call id (of tool) that follow it: a provider that takes images only
// from the user (OpenAI) gets them there.
func imagesIntro(n int, id, tool string) string {
	what := "The image"
	if n > 1 {
		what = fmt.Sprintf("The %d images", n)
	}
	return fmt.Sprintf("(%s in the result of tool call %s, %s:)", what, id, tool)
}

// dataURL is img as a data: URL.
func dataURL(img Image) string {
	return "data:" + img.MIME + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
}
