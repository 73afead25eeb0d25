package slackui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"golang.org/x/net/idna"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/tools"
)

// The "Show all" button under a card whose arguments were shortened, and
// its actions block.
const (
	ActionShowArgs   = "show_args"
	BlockArgsActions = "args_actions"
)

// Budgets of the parts of http_request's arguments on a card.
const (
	budgetHeaderValue = 200  // one header's value
	budgetBody        = 1200 // the body, in a code block
	maxArgsModalCode  = 2900 // one code block of the "Show all" modal
	maxArgsModalParts = 90   // code blocks in it (Slack allows 100 blocks)
)

// argsView shows what a call will run with. For http_request the method
// and the whole URL are never shortened, and a host that is not plain
// ASCII is shown as the punycode that is dialled, with its Unicode form
// beside it; only header values and the body are shortened. Any other
// tool's arguments are shown as pretty JSON. clipped reports whether
// anything was shortened, in which case the card offers "Show all".
func argsView(c agent.Call) (blocks []slack.Block, clipped bool) {
	args := ShownArgs(c)
	if c.Tool == tools.HTTPRequestName {
		if blocks, clipped, ok := httpArgsView(args); ok {
			return blocks, clipped
		}
	}
	if len(bytes.TrimSpace(args)) == 0 {
		return []slack.Block{SectionBlock("*Arguments*\n_none_")}, false
	}
	pretty := string(indentJSON(args))
	code, shown := FitCode(pretty, budgetCode)
	blocks = []slack.Block{SectionBlock("*Arguments*\n" + code)}
	if hasInvisible(string(args)) {
		blocks = append(blocks, ContextBlock(invisibleNote))
	}
	if c.Tool == tools.HTTPRequestName {
		if l := dialledHostLine(args); l != "" {
			blocks = append(blocks, ContextBlock(l))
		}
	}
	if total := len([]rune(pretty)); shown < total {
		blocks = append(blocks, ContextBlock(fmt.Sprintf("✂️ The arguments are cut to fit Slack: showing %s of %s characters. *Show all* shows every one.",
			withCommas(shown), withCommas(total))))
		return blocks, true
	}
	return blocks, false
}

// invisibleNote is said under arguments that hold invisible characters.
const invisibleNote = "👁️ These arguments hold characters that show as nothing or change how text reads " +
	"(zero-width, bidirectional or tag characters); they are shown as JSON escapes such as `\\u200b`."

// httpArgsView renders http_request's arguments; ok is false if they do
// not decode as such.
func httpArgsView(args json.RawMessage) (blocks []slack.Block, clipped, ok bool) {
	var a struct {
		Method  string            `json:"method"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
		Body    *string           `json:"body"`
	}
	if json.Unmarshal(args, &a) != nil || hasInvisible(string(args)) || controlInRequest(a.Method, a.URL, a.Headers) {
		// Arguments with characters that show as nothing, or a line
		// break in the request line or a header (which would show as a
		// line of its own, another header), are shown as JSON, where
		// they are written as escapes.
		return nil, false, false
	}
	shownURL, unicodeHost := DialledURL(a.URL)
	blocks = wholeCode("*Request*", a.Method+" "+shownURL)
	if unicodeHost != "" {
		blocks = append(blocks, ContextBlock("🌐 The host "+CodeSpan(hostOf(shownURL))+" is written "+CodeSpan(unicodeHost)+" in Unicode."))
	}
	if len(a.Headers) > 0 {
		var lines []string
		for _, name := range slices.Sorted(maps.Keys(a.Headers)) {
			value, more := clipCount(a.Headers[name], budgetHeaderValue)
			clipped = clipped || more > 0
			name, moreName := clipCount(name, BudgetName)
			clipped = clipped || moreName > 0
			lines = append(lines, name+": "+value+moreText(more))
		}
		code, shown := FitCode(strings.Join(lines, "\n"), budgetCode)
		clipped = clipped || shown < len([]rune(strings.Join(lines, "\n")))
		blocks = append(blocks, SectionBlock("*Headers*\n"+code))
	}
	if a.Body != nil {
		body, more := clipCount(*a.Body, budgetBody)
		clipped = clipped || more > 0
		code, _ := FitCode(body, budgetCode)
		text := "*Body*\n" + code
		if more > 0 {
			text += "\n_" + strings.TrimPrefix(moreText(more), " ") + "_"
		}
		blocks = append(blocks, SectionBlock(text))
	}
	return blocks, clipped, true
}

// dialledHostLine says which host an http_request shown as JSON dials,
// when that is not the host as written: a host with a character that
// shows as nothing, which the dialler drops ("exa\u200bmple.com" dials
// example.com), or a Unicode one, dialled as its punycode. "" otherwise.
func dialledHostLine(args json.RawMessage) string {
	var a struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(args, &a) != nil {
		return ""
	}
	shown, _ := DialledURL(a.URL)
	if shown == a.URL {
		return ""
	}
	return "🌐 The host " + CodeSpan(visibleJSON(hostOf(a.URL))) + " is dialled as " + CodeSpan(hostOf(shown)) + "."
}

// controlInRequest reports whether the method, the URL or a header's
// name or value holds a control character.
func controlInRequest(method, url string, headers map[string]string) bool {
	control := func(r rune) bool { return r < 0x20 || r == 0x7f }
	if strings.ContainsFunc(method+url, control) {
		return true
	}
	for k, v := range headers {
		if strings.ContainsFunc(k+v, control) {
			return true
		}
	}
	return false
}

// DialledURL is the URL as the tool will dial it: a Unicode host in its
// punycode form. unicodeHost is the host's Unicode form when it differs
// from what is shown.
func DialledURL(raw string) (shown, unicodeHost string) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw, ""
	}
	host := u.Hostname()
	ascii, err := idna.Lookup.ToASCII(host)
	if err != nil {
		return raw, ""
	}
	uni, err := idna.Display.ToUnicode(ascii)
	if err != nil || uni == ascii {
		uni = ""
	}
	if ascii != host {
		if port := u.Port(); port != "" {
			u.Host = ascii + ":" + port
		} else {
			u.Host = ascii
		}
		return u.String(), uni
	}
	return raw, uni
}

func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Hostname()
	}
	return raw
}

// wholeCode shows text in full, in as many code blocks as it takes:
// nothing of it is ever cut.
func wholeCode(title, text string) []slack.Block {
	var blocks []slack.Block
	for rest := text; ; {
		content, shown, complete := codeContent(rest, budgetCode)
		blocks = append(blocks, SectionBlock(title+"\n```\n"+content+"\n```"))
		if complete {
			return blocks
		}
		rest = string([]rune(rest)[shown:])
		title = "_(continued)_"
	}
}

// clipCount shortens s to at most limit characters and says how many
// more it had.
func clipCount(s string, limit int) (string, int) {
	r := []rune(s)
	if len(r) <= limit {
		return s, 0
	}
	return string(r[:limit]), len(r) - limit
}

func moreText(more int) string {
	if more == 0 {
		return ""
	}
	if more == 1 {
		return " … 1 more character"
	}
	return " … " + withCommas(more) + " more characters"
}

// showAllBlock is the "Show all" button under shortened arguments.
func showAllBlock(ref string) slack.Block {
	return slack.NewActionBlock(BlockArgsActions, Button(ActionShowArgs, "Show all", ref, slack.StyleDefault))
}

// hashLine shows the short form of the hash an approval is bound to.
func hashLine(c agent.Call) slack.Block {
	hash := c.RunHash()
	return ContextBlock("🔏 Arguments hash " + CodeSpan("sha256:"+tools.ShortHash(hash)) + " — an approval runs exactly these arguments.")
}

// ArgsModal shows every byte of a call's arguments (credentials masked),
// in as many code blocks as they take: pretty JSON, or compact JSON where the pretty form
// would not fit (tools.MaxArgsLen makes sure the compact one does).
func ArgsModal(c agent.Call) slack.ModalViewRequest {
	view := slack.ModalViewRequest{
		Type:  slack.VTModal,
		Title: PlainTextObject("All arguments"),
		Close: PlainTextObject("Close"),
	}
	head := []slack.Block{ContextBlock("Tool " + CodeSpan(c.Tool) + " · hash " + CodeSpan("sha256:"+tools.ShortHash(c.RunHash())))}
	if hasInvisible(string(ShownArgs(c))) {
		head = append(head, ContextBlock(invisibleNote))
	}
	for _, text := range []string{string(indentJSON(ShownArgs(c))), visibleJSON(string(ShownArgs(c)))} {
		if parts, ok := codeParts(text); ok {
			view.Blocks.BlockSet = append(head, parts...)
			return view
		}
	}
	view.Blocks.BlockSet = append(head, ContextBlock("The arguments are longer than a Slack window holds; reject the call and ask the agent for a smaller one."))
	return view
}

// codeParts cuts text into code blocks, all of it, or reports that it
// takes more than maxArgsModalParts.
func codeParts(text string) ([]slack.Block, bool) {
	// codeContent counts the characters of the text made valid UTF-8;
	// each part goes on from there in that same text, cut at a byte
	// offset, so that a part costs what it shows, not the whole text.
	rest := strings.ToValidUTF8(text, "\uFFFD")
	var blocks []slack.Block
	for len(blocks) < maxArgsModalParts {
		content, shown, complete := codeContent(rest, maxArgsModalCode)
		blocks = append(blocks, SectionBlock("```\n"+content+"\n```"))
		if complete {
			return blocks, true
		}
		rest = rest[runesBytes(rest, shown):]
	}
	return nil, false
}

// runesBytes is how many bytes the first n characters of s take.
func runesBytes(s string, n int) int {
	i := 0
	for ; n > 0 && i < len(s); n-- {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
}
