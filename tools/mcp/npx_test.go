package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/countersign/countersign/internal/imagetest"
	"github.com/countersign/countersign/internal/proctest"
	"github.com/countersign/countersign/tools"
	"github.com/countersign/countersign/tools/mcp"
)

// npx finds npx, which runs the MCP servers published on npm. The tests
// that need it fail rather than skip without it: `make test` installs
// Node when it is missing and fetches the servers once (.ci/with-redis).
// Under -short (`make test-fast`) they skip: that tier runs no Node.
func npx(t *testing.T) string {
	t.Helper()
	needsNode(t)
	path, err := exec.LookPath("npx")
	if err != nil {
		t.Fatalf("npx not found (%v): these tests run MCP servers from npm with Node's npx; "+
			"install Node (apt-get install nodejs npm) or run them through `make test`", err)
	}
	return path
}

// needsNode skips a test that runs Node under -short.
func needsNode(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Node (an MCP server); `make test` runs it (go test without -short)")
	}
}

func everythingPolicy(t *testing.T, extra string) string {
	return fmt.Sprintf("mcp_servers:\n  everything:\n    command: [%s, -y, \"@modelcontextprotocol/server-everything\"]\n%s", npx(t), extra)
}

func call(t *testing.T, m *mcp.Manager, name, args string) (string, error) {
	t.Helper()
	tool, _, ok := m.Lookup(name)
	if !ok {
		t.Fatalf("Lookup(%q): not offered; tools: %v", name, toolNames(m.Tools()))
	}
	if err := m.Validate(name, json.RawMessage(args)); err != nil {
		t.Fatalf("Validate(%s, %s) = %v", name, args, err)
	}
	info := tools.CallInfo{Thread: "T1:C1:1.0", Call: "0.0", Attempt: 1, Requester: "U1", Channel: "C1"}
	return tool.(tools.InfoTool).CallWithInfo(context.Background(), info, json.RawMessage(args))
}

func TestEverythingServer(t *testing.T) {
	m := newManager(t, everythingPolicy(t, ""), mcp.Options{})
	names := strings.Join(toolNames(m.Tools()), " ")
	for _, want := range []string{"everything__echo", "everything__get-sum", "everything__get-structured-content", "everything__trigger-elicitation-request"} {
		if !strings.Contains(names, want) {
			t.Errorf("Tools() = %s, want %s among them", names, want)
		}
	}
	tests := []struct {
		tool, args string
		want       []string
	}{
		{"everything__echo", `{"message":"hello"}`, []string{"Echo: hello"}},
		{"everything__get-sum", `{"a":2,"b":3}`, []string{"5"}},
		{"everything__get-structured-content", `{"location":"Chicago"}`, []string{`"temperature"`}},
		{"everything__get-tiny-image", `{}`, []string{"[image image/png, "}},
	}
	for _, tt := range tests {
		got, err := call(t, m, tt.tool, tt.args)
		if err != nil {
			t.Errorf("%s(%s) = %v", tt.tool, tt.args, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s(%s) = %q, want %q in it", tt.tool, tt.args, got, w)
			}
		}
	}
	// The server's tiny image is a real PNG: the model is shown it.
	tool, _, _ := m.Lookup("everything__get-tiny-image")
	text, images, err := tool.(tools.ImageTool).CallWithImages(context.Background(), tools.CallInfo{}, json.RawMessage(`{}`))
	if err != nil || len(images) != 1 || images[0].MIME != "image/png" || !regexp.MustCompile(`\[image image/png, [0-9.]+ (bytes|KiB)\]`).MatchString(text) {
		t.Errorf("get-tiny-image = %q, %d images, %v; want its PNG for the model", text, len(images), err)
	}
	if err := m.Validate("everything__get-sum", json.RawMessage(`{"a":"two"}`)); err == nil || !strings.Contains(err.Error(), "a: must be number") {
		t.Errorf("Validate(get-sum, a string) = %v, want a schema error", err)
	}
}

func TestEverythingElicitation(t *testing.T) {
	el := &fakeElicitor{answer: tools.ElicitAnswer{Action: tools.ElicitAccept, Content: map[string]any{"name": "Ada Lovelace", "check": true}}}
	m := newManager(t, everythingPolicy(t, ""), mcp.Options{Elicitor: el})
	got, err := call(t, m, "everything__trigger-elicitation-request", `{}`)
	if err != nil || !strings.Contains(got, "Name: Ada Lovelace") || !strings.Contains(got, "Agreed to terms: true") {
		t.Fatalf("trigger-elicitation-request = %q, %v; want the answer in the result", got, err)
	}
	if len(el.got) != 1 || el.got[0].Call.Requester != "U1" || !strings.Contains(string(el.got[0].Schema), `"firstLine"`) {
		t.Errorf("elicitations = %+v, want one to the requester with the server's schema", el.got)
	}
}

func TestEverythingKilledMidCall(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	m := newManager(t, everythingPolicy(t, "    timeout: 2m\n"), mcp.Options{MinBackoff: 10 * time.Millisecond, Logger: log})
	m.Tools()
	errc := make(chan error, 1)
	go func() {
		_, err := call(t, m, "everything__trigger-long-running-operation", `{"duration":120,"steps":120}`)
		errc <- err
	}()
	// Kill the server once the call is sent: its process, and npx's.
	waitFor(t, "the call to be sent", func() bool {
		for _, e := range hook.AllEntries() {
			if e.Message == "calling MCP tool" {
				return len(proctest.Descendants("server-everything")) > 0
			}
		}
		return false
	})
	for _, pid := range proctest.Descendants("server-everything") {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	err := <-errc
	if !errors.Is(err, tools.ErrOutcomeUnknown) {
		t.Fatalf("call cut off by the server's death = %v, want an unknown outcome", err)
	}
	// The server comes back and its tools with it.
	var got string
	waitFor(t, "the server to answer again", func() bool {
		if m.Validate("everything__echo", json.RawMessage(`{"message":"back"}`)) != nil {
			return false // still down: refused before a card
		}
		// Not call: the session seen up may be the old one, whose end the
		// bot has yet to notice.
		tool, _, _ := m.Lookup("everything__echo")
		got, err = tool.(tools.InfoTool).CallWithInfo(context.Background(), tools.CallInfo{}, json.RawMessage(`{"message":"back"}`))
		return err == nil
	})
	if got != "Echo: back" {
		t.Errorf("echo after the restart = %q", got)
	}
}

func TestServerThatDoesNotStart(t *testing.T) {
	needsNode(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: %v", err)
	}
	m := newManager(t, "mcp_servers:\n  broken:\n    command: ["+node+", -e, \"console.error('no config: set API_TOKEN'); process.exit(3)\"]\n",
		mcp.Options{MinBackoff: time.Hour})
	if got := toolNames(m.Tools()); len(got) != 0 {
		t.Errorf("Tools() = %v, want none", got)
	}
	if d := m.Describe(); !strings.Contains(d, "mcp broken: down: ") || !strings.Contains(d, "no config: set API_TOKEN") {
		t.Errorf("Describe() = %q, want the server down with its last words", d)
	}
}

func TestFilesystemServer(t *testing.T) {
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		// The server runs as nobody: the files it serves are nobody's.
		dir = nobodysDir(t)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("buy milk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  fs:\n    command: [%s, -y, \"@modelcontextprotocol/server-filesystem\", %q]\n", npx(t), dir), mcp.Options{})
	got, err := call(t, m, "fs__read_text_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "notes.txt")))
	if err != nil || !strings.Contains(got, "buy milk") {
		t.Errorf("read_text_file = %q, %v", got, err)
	}
	_, err = call(t, m, "fs__read_text_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "missing.txt")))
	if err == nil || !strings.Contains(err.Error(), "ENOENT") || errors.Is(err, tools.ErrOutcomeUnknown) {
		t.Errorf("read_text_file(missing) = %v, want the server's isError text as an error", err)
	}
	// read_media_file names the type by the file's extension: a PNG
	// reaches the model as itself, a text file named .png as its line.
	shot := imagetest.PNG(6, 0)
	if err := os.WriteFile(filepath.Join(dir, "shot.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fake.png"), []byte("not a picture"), 0o644); err != nil {
		t.Fatal(err)
	}
	media, _, _ := m.Lookup("fs__read_media_file")
	text, images, err := media.(tools.ImageTool).CallWithImages(context.Background(), tools.CallInfo{}, json.RawMessage(fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "shot.png"))))
	if err != nil || len(images) != 1 || images[0].MIME != "image/png" || !bytes.Equal(images[0].Data, shot) {
		t.Errorf("read_media_file(shot.png) = %q, %d images, %v; want the PNG for the model, byte for byte", text, len(images), err)
	}
	text, images, err = media.(tools.ImageTool).CallWithImages(context.Background(), tools.CallInfo{}, json.RawMessage(fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "fake.png"))))
	if err != nil || len(images) != 0 || !strings.Contains(text, "the data is not a PNG image") {
		t.Errorf("read_media_file(fake.png) = %q, %d images, %v; want the line saying it is no PNG, and no image", text, len(images), err)
	}
	if _, err := call(t, m, "fs__write_file", fmt.Sprintf(`{"path":%q,"content":"x"}`, filepath.Join(dir, "new.txt"))); err != nil {
		t.Errorf("write_file = %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new.txt")); string(b) != "x" {
		t.Errorf("new.txt = %q, want the file written", b)
	}
}

func TestServerWordsAreRedacted(t *testing.T) {
	needsNode(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: %v", err)
	}
	m := newManager(t, "mcp_servers:\n  leaky:\n    command: ["+node+", -e, \"console.error('bad token ' + process.env.API_TOKEN); process.exit(3)\"]\n    env: {API_TOKEN: \"${TOKEN}\"}\n",
		mcp.Options{MinBackoff: time.Hour})
	m.Tools()
	if d := m.Describe(); strings.Contains(d, "s3cret") || !strings.Contains(d, "bad token "+tools.Masked) {
		t.Errorf("Describe() = %q, want the server's words without its token", d)
	}
}

// nobodysDir is a directory that belongs to nobody, removed after the test.
func nobodysDir(t *testing.T) string {
	t.Helper()
	u, err := user.Lookup(mcp.DefaultServerUser)
	if err != nil {
		t.Fatalf("the tests run as root and need the user %s: %v", mcp.DefaultServerUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "nobodys-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A stdio server runs as its entry's user when the bot is root, and a
// user: the bot cannot switch to keeps it from starting.
func TestServerRunsAsItsUser(t *testing.T) {
	needsNode(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: %v", err)
	}
	m := newManager(t, "mcp_servers:\n  who:\n    command: ["+node+", -e, \"console.error('uid ' + process.getuid() + ' home ' + process.env.HOME + ' cwd ' + process.cwd()); process.exit(3)\"]\n    user: daemon\n",
		mcp.Options{MinBackoff: time.Hour})
	m.Tools()
	d := m.Describe()
	if os.Geteuid() != 0 {
		if !strings.Contains(d, `user \"daemon\": cannot run the server as its user: the bot does not run as root`) {
			t.Errorf("Describe() = %q, want the server down: the bot cannot switch users", d)
		}
		return
	}
	u, err := user.Lookup("daemon")
	if err != nil {
		t.Fatalf("the tests run as root and need the user daemon: %v", err)
	}
	home := filepath.Join(os.TempDir(), "countersign-mcp", "daemon")
	if want := "uid " + u.Uid + " home " + home + " cwd " + home; !strings.Contains(d, want) {
		t.Errorf("Describe() = %q, want the server's words %q", d, want)
	}
	fi, err := os.Stat(home)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the server's home: %v, %v; want a directory closed to others", fi, err)
	}
}

// A server whose stdout has lines that are not JSON-RPC (a wrapper
// script's banner, a logger's JSON) before and between its messages
// starts and answers: the lines are left out and logged, the server's
// secrets hidden, as the reference clients read such servers.
func TestServerThatPrintsBeforeTheHandshake(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	script := "echo 'Starting the everything server…'; echo; echo '  token '$API_TOKEN' loaded'; " +
		`echo '{"level":30,"msg":"listening on stdio"}'; exec ` + npx(t) + " -y @modelcontextprotocol/server-everything"
	m := newManager(t, fmt.Sprintf("mcp_servers:\n  everything:\n    command: [/bin/sh, -c, %q]\n    env: {API_TOKEN: \"${TOKEN}\"}\n", script),
		mcp.Options{MinBackoff: time.Hour, Logger: log})
	if got, err := call(t, m, "everything__echo", `{"message":"hello"}`); err != nil || !strings.Contains(got, "Echo: hello") {
		t.Fatalf("everything__echo = %q, %v; want the echo (server: %s)", got, err, m.Describe())
	}
	var lines []string
	for _, e := range hook.AllEntries() {
		if l, ok := e.Data["line"].(string); ok {
			lines = append(lines, l)
		}
	}
	want := []string{"Starting the everything server…", "token " + tools.Masked + " loaded", `{"level":30,"msg":"listening on stdio"}`}
	if !slices.Equal(lines, want) {
		t.Errorf("lines logged = %q, want %q", lines, want)
	}
}
