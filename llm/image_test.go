package llm_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/gif"
	"image/png"
	"io"
	"strings"
	"testing"

	"github.com/sirupsen/logrus/hooks/test"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

// A tiny PNG and a tiny GIF, which the providers (and their fakes)
// decode.
var (
	pngImage = llm.Image{MIME: "image/png", Data: encoded(png.Encode)}
	gifImage = llm.Image{MIME: "image/gif", Data: encoded(func(w io.Writer, m image.Image) error { return gif.Encode(w, m, nil) })}
)

// encoded is a 2×2 image as encode writes it.
func encoded(encode func(io.Writer, image.Image) error) []byte {
	m := image.NewGray(image.Rect(0, 0, 2, 2))
	m.Pix[0] = 0xff
	var b bytes.Buffer
	if err := encode(&b, m); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// imageConversation ends with two results of one turn: the first with a
// PNG and a GIF, the second with text only.
func imageConversation() []llm.Message {
	return []llm.Message{
		{Role: llm.RoleSystem, Content: "You are Countersign."},
		{Role: llm.RoleUser, Content: "Show me the dashboard and the chart."},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
			{ID: "call_shot", Name: "browser__screenshot", Arguments: `{}`},
			{ID: "call_log", Name: "http_request", Arguments: argsA},
		}},
		{Role: llm.RoleTool, ToolCallID: "call_shot", Name: "browser__screenshot",
			Content: "[image image/png, 28 bytes]\n[image image/gif, 21 bytes]", Images: []llm.Image{pngImage, gifImage}},
		{Role: llm.RoleTool, ToolCallID: "call_log", Name: "http_request", Content: "200 OK"},
	}
}

func sameImages(got, want []llm.Image) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].MIME != want[i].MIME || !bytes.Equal(got[i].Data, want[i].Data) {
			return false
		}
	}
	return true
}

// OpenAI takes images from the user only: after the turn's tool messages
// (whose text keeps the lines) comes one user message that names the
// call and holds its images, byte for byte.
func TestOpenAIGetsAResultsImagesInAUserMessage(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("The dashboard is green."))
	if _, err := newOpenAI(t, srv).Generate(context.Background(), imageConversation(), testTools); err != nil {
		t.Fatalf("Generate() = %v", err)
	}
	msgs := srv.Requests()[0].Messages
	if n := len(msgs); n != 6 {
		t.Fatalf("%d messages sent, want 6 (system, user, assistant, two tool messages, the images)", n)
	}
	if msgs[3].Role != "tool" || msgs[3].Text() != "[image image/png, 28 bytes]\n[image image/gif, 21 bytes]" || msgs[3].Images() != nil {
		t.Errorf("first tool message = %s %q with %d images; want its text only", msgs[3].Role, msgs[3].Text(), len(msgs[3].Images()))
	}
	last := msgs[5]
	if last.Role != "user" || !sameImages(last.Images(), []llm.Image{pngImage, gifImage}) {
		t.Errorf("last message = %s with %d images; want the user's with the PNG and the GIF", last.Role, len(last.Images()))
	}
	if !strings.Contains(last.Text(), "call_shot") || !strings.Contains(last.Text(), "browser__screenshot") {
		t.Errorf("the images' message says %q; want it to name the call and the tool", last.Text())
	}
}

// Anthropic takes images in a tool_result's content: after its text.
func TestAnthropicGetsAResultsImagesInItsToolResult(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply("The dashboard is green."))
	if _, err := newAnthropic(t, srv).Generate(context.Background(), imageConversation(), testTools); err != nil {
		t.Fatalf("Generate() = %v", err)
	}
	msgs := srv.Requests()[0].Messages
	last := msgs[len(msgs)-1]
	if last.Role != "user" || len(last.Content) != 2 {
		t.Fatalf("last message = %s with %d blocks; want the user's two tool results", last.Role, len(last.Content))
	}
	shot, log := last.Content[0], last.Content[1]
	if shot.ToolUseID != "call_shot" || shot.ResultText() != "[image image/png, 28 bytes]\n[image image/gif, 21 bytes]" ||
		!sameImages(shot.Images(), []llm.Image{pngImage, gifImage}) {
		t.Errorf("screenshot's result = %s %q with %d images; want its text, then the PNG and the GIF", shot.ToolUseID, shot.ResultText(), len(shot.Images()))
	}
	if log.ResultText() != "200 OK" || log.Images() != nil {
		t.Errorf("other result = %q with %d images; want its text only", log.ResultText(), len(log.Images()))
	}
}

// LLM_IMAGES=off: a model that takes no images gets the lines only.
func TestImagesOffSendsTheLinesOnly(t *testing.T) {
	t.Parallel()
	env := func(srvVar, url string) func(string) string {
		return func(k string) string {
			return map[string]string{"LLM_PROVIDER": map[string]string{"OPENAI_BASE_URL": "openai", "ANTHROPIC_BASE_URL": "anthropic"}[srvVar],
				srvVar: url, "ANTHROPIC_API_KEY": "k", "LLM_IMAGES": "off"}[k]
		}
	}
	oa := llmtest.NewOpenAIServer(t, llmtest.Reply("ok"))
	m, err := llm.FromEnv(env("OPENAI_BASE_URL", oa.URL()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Generate(context.Background(), imageConversation(), testTools); err != nil {
		t.Fatalf("OpenAI Generate() = %v", err)
	}
	msgs := oa.Requests()[0].Messages
	if n := len(msgs); n != 5 || msgs[3].Text() != "[image image/png, 28 bytes]\n[image image/gif, 21 bytes]" {
		t.Errorf("OpenAI was sent %d messages; want the 5 of the conversation, the lines in the tool message", n)
	}
	an := llmtest.NewAnthropicServer(t, llmtest.Reply("ok"))
	if m, err = llm.FromEnv(env("ANTHROPIC_BASE_URL", an.URL())); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Generate(context.Background(), imageConversation(), testTools); err != nil {
		t.Fatalf("Anthropic Generate() = %v", err)
	}
	amsgs := an.Requests()[0].Messages
	if shot := amsgs[len(amsgs)-1].Content[0]; shot.Images() != nil || !strings.Contains(shot.ResultText(), "[image image/png, 28 bytes]") {
		t.Errorf("Anthropic's tool result = %q with %d images; want the lines only", shot.ResultText(), len(shot.Images()))
	}
	if _, err := llm.FromEnv(func(k string) string { return map[string]string{"LLM_IMAGES": "sometimes"}[k] }); err == nil ||
		!strings.Contains(err.Error(), "LLM_IMAGES") {
		t.Errorf("LLM_IMAGES=sometimes: error %v, want one naming LLM_IMAGES", err)
	}
}

// A long thread of screenshots: each request shows the model the newest
// MaxRequestImages only, the older ones being their lines.
func TestARequestShowsTheNewestImagesOnly(t *testing.T) {
	t.Parallel()
	conv := []llm.Message{{Role: llm.RoleUser, Content: "Keep watching the page."}}
	const shots = llm.MaxRequestImages + 5
	for i := range shots {
		id := fmt.Sprintf("call_%d", i)
		img := llm.Image{MIME: "image/png", Data: append(slicesClone(pngImage.Data), byte(i))}
		conv = append(conv,
			llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: "browser__screenshot", Arguments: `{}`}}},
			llm.Message{Role: llm.RoleTool, ToolCallID: id, Name: "browser__screenshot", Content: "[image image/png, 29 bytes]", Images: []llm.Image{img}})
	}
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply("Still green."))
	if _, err := newAnthropic(t, srv).Generate(context.Background(), conv, testTools); err != nil {
		t.Fatalf("Generate() = %v", err)
	}
	var sent []byte // the last byte of each image sent, in order
	for _, m := range srv.Requests()[0].Messages {
		for _, b := range m.Content {
			for _, img := range b.Images() {
				sent = append(sent, img.Data[len(img.Data)-1])
			}
		}
	}
	if len(sent) != llm.MaxRequestImages || sent[0] != 5 || sent[len(sent)-1] != shots-1 {
		t.Errorf("images sent = %v; want the newest %d (5 to %d)", sent, llm.MaxRequestImages, shots-1)
	}
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

// A model that takes no images, named where LLM_IMAGES=off was not set
// (gpt-3.5-turbo, a local text model behind OPENAI_BASE_URL), refuses a
// request with one: the request is sent again with the images' lines,
// and so is every later one, rather than the conversation failing at
// every turn from then on. The operator is told once. An image that one
// model would not take (not the model's refusal of every image) is left
// out of that request only.
func TestAModelThatTakesNoImagesGetsTheLines(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewOpenAIServer(t, llmtest.Reply("The lines say it is a screenshot."), llmtest.Reply("Still the lines."))
	srv.TakesNoImages("gpt-3.5-turbo")
	log, hook := test.NewNullLogger()
	env := map[string]string{"OPENAI_BASE_URL": srv.URL(), "LLM_MODEL": "gpt-3.5-turbo"}
	m, err := llm.FromEnvWithLogger(func(k string) string { return env[k] }, log)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.Generate(context.Background(), imageConversation(), testTools); err != nil || got.Content != "The lines say it is a screenshot." {
		t.Fatalf("Generate() = %q, %v; want the first reply", got.Content, err)
	}
	got, err := llm.Stream(context.Background(), m, imageConversation(), testTools, func(context.Context, string) error { return nil })
	if err != nil || got.Content != "Still the lines." {
		t.Fatalf("Stream() = %q, %v; want the second reply", got.Content, err)
	}
	var sent []string
	for _, r := range srv.Requests() {
		images := 0
		for _, m := range r.Messages {
			images += len(m.Images())
		}
		sent = append(sent, fmt.Sprintf("%d:%d messages, %d images", r.Status, len(r.Messages), images))
	}
	want := []string{"400:6 messages, 2 images", "200:5 messages, 0 images", "200:5 messages, 0 images"}
	if fmt.Sprint(sent) != fmt.Sprint(want) {
		t.Errorf("requests = %v, want %v (refused once, then the lines only)", sent, want)
	}
	if msgs := srv.Requests()[1].Messages; msgs[3].Text() != "[image image/png, 28 bytes]\n[image image/gif, 21 bytes]" {
		t.Errorf("the tool message sent again says %q; want the images' lines", msgs[3].Text())
	}
	if warned := warnings(hook, "takes no images"); warned != 1 {
		t.Errorf("%d warnings that the model takes no images, want 1", warned)
	}

	// An image the model would not take: that request goes with the
	// lines, the next one with the images again.
	srv2 := llmtest.NewOpenAIServer(t, llmtest.Reply("first"), llmtest.Reply("second"))
	conv := imageConversation()
	conv[3].Images = []llm.Image{{MIME: "image/png", Data: gifImage.Data}} // a GIF that says it is a PNG
	m2 := newOpenAI(t, srv2)
	for range 2 {
		if _, err := m2.Generate(context.Background(), conv, testTools); err != nil {
			t.Fatalf("Generate() = %v; want the request sent again without the image", err)
		}
	}
	var statuses []int
	for _, r := range srv2.Requests() {
		statuses = append(statuses, r.Status)
	}
	if want := []int{400, 200, 400, 200}; fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Errorf("statuses = %v, want %v (each request tries the image, then goes without it)", statuses, want)
	}

	// Another 400 is not taken for a refusal of images.
	srv3 := llmtest.NewOpenAIServer(t)
	srv3.ThenRaw(llmtest.Raw{Status: 400, Body: `{"error":{"message":"Invalid value for 'top_p'","type":"invalid_request_error","param":"top_p","code":"invalid_value"}}`})
	if _, err := newOpenAI(t, srv3).Generate(context.Background(), imageConversation(), testTools); err == nil {
		t.Errorf("Generate() = nil error; want the 400 about top_p")
	}
	if n := len(srv3.Requests()); n != 1 {
		t.Errorf("%d requests, want 1: a 400 about something else is not sent again", n)
	}
}

// A person's message with the screenshot they attached: both providers
// get the image in that user message, after its text, byte for byte
// (OpenAI: an image_url part; Anthropic: an image block in the user
// turn), and the next user message has none.
func TestUserMessageImagesReachBothProviders(t *testing.T) {
	t.Parallel()
	conv := []llm.Message{
		{Role: llm.RoleSystem, Content: "You are Countersign."},
		{Role: llm.RoleUser, Content: "why does this fail?\n[image \"shot.png\", image/png, 28 bytes]", Images: []llm.Image{pngImage}},
		{Role: llm.RoleAssistant, Content: "Which service?"},
		{Role: llm.RoleUser, Content: "the API"},
	}
	t.Run("openai", func(t *testing.T) {
		srv := llmtest.NewOpenAIServer(t, llmtest.Reply("A timeout."))
		if _, err := newOpenAI(t, srv).Generate(context.Background(), conv, testTools); err != nil {
			t.Fatalf("Generate() = %v", err)
		}
		msgs := srv.Requests()[0].Messages
		if len(msgs) != 4 || msgs[1].Role != "user" || !sameImages(msgs[1].Images(), []llm.Image{pngImage}) || !strings.HasPrefix(msgs[1].Text(), "why does this fail?") {
			t.Fatalf("messages %+v; want the first user message with its text and the PNG", msgs)
		}
		if msgs[3].Images() != nil {
			t.Errorf("the last user message holds images")
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		srv := llmtest.NewAnthropicServer(t, llmtest.Reply("A timeout."))
		if _, err := newAnthropic(t, srv).Generate(context.Background(), conv, testTools); err != nil {
			t.Fatalf("Generate() = %v", err)
		}
		req := srv.Requests()[0]
		if req.Problem != "" {
			t.Fatalf("Anthropic refused the request: %s", req.Problem)
		}
		first := req.Messages[0]
		if first.Role != "user" || !sameImages(first.Images(), []llm.Image{pngImage}) || !strings.HasPrefix(first.Text(), "why does this fail?") {
			t.Fatalf("first message %+v; want the user's text and the PNG", first)
		}
		if req.Messages[2].Images() != nil {
			t.Errorf("the last user message holds images")
		}
	})
}

// brokenPNG is a PNG whose signature and header are right, as the bot
// checks them (tools.CheckImage), and whose pixel data is damaged: a
// tool's truncated screenshot, or a server's lie.
func brokenPNG() []byte {
	b := encoded(png.Encode)
	at := bytes.Index(b, []byte("IDAT")) + 4
	for i := at; i < at+4 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	return b
}

// An image Anthropic would not take, though its first bytes and header
// passed the bot's check, is kept in the conversation: without a second
// try, every later request of the thread would be refused as well. The
// request goes again with the images' lines, at each turn, and the
// operator is told.
func TestAnImageAnthropicRefusesDoesNotBreakTheThread(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewAnthropicServer(t, llmtest.Reply("The lines say it is a screenshot."), llmtest.Reply("Still the lines."))
	log, hook := test.NewNullLogger()
	m, err := llm.NewAnthropic(llm.AnthropicOptions{APIKey: "sk-ant-test", BaseURL: srv.URL(), Model: "claude-test", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	conv := imageConversation()
	conv[3].Images = []llm.Image{{MIME: "image/png", Data: brokenPNG()}, gifImage}
	if got, err := m.Generate(context.Background(), conv, testTools); err != nil || got.Content != "The lines say it is a screenshot." {
		t.Fatalf("Generate() = %q, %v; want the reply to the request sent again", got.Content, err)
	}
	got, err := llm.Stream(context.Background(), m, conv, testTools, func(context.Context, string) error { return nil })
	if err != nil || got.Content != "Still the lines." {
		t.Fatalf("Stream() = %q, %v; want the second reply", got.Content, err)
	}
	var statuses []int
	for _, r := range srv.Requests() {
		statuses = append(statuses, r.Status)
	}
	if want := []int{400, 200, 400, 200}; fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Fatalf("statuses = %v, want %v (each turn tries the images, then goes without them)", statuses, want)
	}
	if p := srv.Requests()[0].Problem; !strings.Contains(p, "Could not process image") {
		t.Errorf("the first request was refused for %q; want the broken image", p)
	}
	for _, r := range srv.Requests()[1:2] {
		if body := string(r.Body); strings.Contains(body, `"type":"image"`) || !strings.Contains(body, "[image image/png, 28 bytes]") {
			t.Errorf("the request sent again is %s; want the images' lines only", body)
		}
	}
	if warned := warnings(hook, "refused an image"); warned != 2 {
		t.Errorf("%d warnings that the model refused an image, want 2 (one a turn)", warned)
	}

	// Another 400 is not taken for a refusal of images: not sent again.
	srv2 := llmtest.NewAnthropicServer(t)
	srv2.ThenRaw(llmtest.Raw{Status: 400, Body: `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`})
	if _, err := newAnthropic(t, srv2).Generate(context.Background(), imageConversation(), testTools); err == nil {
		t.Error("Generate() = nil error; want the 400 about max_tokens")
	}
	if n := len(srv2.Requests()); n != 1 {
		t.Errorf("%d requests, want 1: a 400 about something else is not sent again", n)
	}
}
