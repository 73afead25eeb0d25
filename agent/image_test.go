package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/agent/agenttest"
	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/tools"
)

var screenshot = append([]byte("\x89PNG\r\n\x1a\n"), "pixels"...)

// shotTool is "lookup" as a tool whose result holds an image.
type shotTool struct{ agenttest.Tool }

func (s *shotTool) CallWithInfo(ctx context.Context, _ tools.CallInfo, args json.RawMessage) (string, error) {
	return s.Call(ctx, args)
}

func (s *shotTool) CallWithImages(ctx context.Context, info tools.CallInfo, args json.RawMessage) (string, []tools.Image, error) {
	text, err := s.CallWithInfo(ctx, info, args)
	return text + "\n[image image/png, 14 bytes]", []tools.Image{{MIME: "image/png", Data: screenshot}}, err
}

// seenModel is the planner, recording the conversations it is given.
type seenModel struct {
	agenttest.Planner
	mu   sync.Mutex
	seen [][]llm.Message
}

func (m *seenModel) Generate(ctx context.Context, msgs []llm.Message, defs []llm.ToolDef) (llm.Message, error) {
	m.mu.Lock()
	m.seen = append(m.seen, msgs)
	m.mu.Unlock()
	return m.Planner.Generate(ctx, msgs, defs)
}

// A call whose tool returns an image: the image is kept with the call
// while another call of the turn waits for a person (in a checkpoint of
// either store), then handed to the model in the call's tool message;
// the text, all people are shown, has its line.
func TestAResultsImagesReachTheModel(t *testing.T) {
	ctx := context.Background()
	forEachStore(t, func(t *testing.T, newStore func() graph.Store) {
		deploy := &agenttest.Tool{ToolName: "deploy"}
		reg := imageRegistry(t, &shotTool{agenttest.Tool{ToolName: "lookup"}}, deploy)
		model := &seenModel{Planner: agenttest.Planner{Plan: func(string) []llm.ToolCall {
			return []llm.ToolCall{{Name: "lookup", Arguments: `{"n":1}`}, {Name: "deploy", Arguments: `{"n":2}`}}
		}}}
		store := newStore()
		a, err := agent.New(model, reg, store, agent.Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := a.Graph().Start(ctx, "t", agent.NewState("t", "U1", "C1", "look, then deploy"), graph.RunConfig{})
		if err != nil || res.Status() != graph.Paused {
			t.Fatalf("Start() = %v, %v; want paused", res, err)
		}
		// Another process reads the paused thread.
		b, err := agent.New(model, reg, store, agent.Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, err = b.Graph().State(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		done := res.State.Calls[0]
		if done.Status != agent.Done || len(done.Images) != 1 || !bytes.Equal(done.Images[0].Data, screenshot) {
			t.Fatalf("the lookup call as stored = %s with %d images; want done with the screenshot", done.Status, len(done.Images))
		}
		if !strings.HasSuffix(done.Result, "\n[image image/png, 14 bytes]") {
			t.Errorf("the lookup call's result = %q; want the image's line", done.Result)
		}
		key := res.State.Waiting()[0].Key
		if res, err = b.Graph().Resume(ctx, "t", b.Decide(map[string]agent.Decision{key: {Kind: agent.Approve, By: "U2"}})); err != nil || res.Status() != graph.Done {
			t.Fatalf("Resume() = %v, %v; want done", res, err)
		}
		model.mu.Lock()
		last := model.seen[len(model.seen)-1]
		model.mu.Unlock()
		var shown []llm.Image
		for _, m := range last {
			if m.Role == llm.RoleTool && m.Name == "lookup" {
				shown = m.Images
			} else if len(m.Images) > 0 {
				t.Errorf("a %s message (%s) has images", m.Role, m.Name)
			}
		}
		if len(shown) != 1 || shown[0].MIME != "image/png" || !bytes.Equal(shown[0].Data, screenshot) {
			t.Errorf("the model was shown %d images with the lookup's result; want the screenshot", len(shown))
		}
		// And the conversation keeps it: a process that reads the thread
		// afresh has it in the journal.
		c, err := agent.New(model, reg, store, agent.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res, err = c.Graph().State(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, m := range res.State.Messages {
			found = found || (m.Name == "lookup" && len(m.Images) == 1 && bytes.Equal(m.Images[0].Data, screenshot))
		}
		if !found {
			t.Error("the journal read back has no lookup result with the screenshot")
		}
	})
}

// A state written before calls had images decodes as it was, and is
// written again byte for byte: the new field adds nothing to a call
// without images.
func TestOldStateDecodesUnchanged(t *testing.T) {
	raw, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	var golden goldenFile
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, golden.Checkpoint.State); err != nil {
		t.Fatal(err)
	}
	var s agent.State
	if err := s.DecodeJSON(compact.Bytes()); err != nil {
		t.Fatalf("DecodeJSON(old state) = %v", err)
	}
	for _, c := range s.Calls {
		if c.Images != nil {
			t.Errorf("call %s of an old state has images", c.Key)
		}
	}
	again, err := s.AppendJSON(nil)
	if err != nil || !bytes.Equal(again, compact.Bytes()) {
		t.Errorf("old state written again:\n%s\nwant\n%s", again, compact.Bytes())
	}
	for i, e := range golden.Journal {
		m, err := llm.DecodeMessage(e)
		if err != nil || m.Images != nil {
			t.Errorf("journal entry %d = %v, %d images; want it decoded, without images", i, err, len(m.Images))
		}
	}
}

// bigShot is "lookup" as a tool whose every result holds a 4 KiB image.
type bigShot struct{ agenttest.Tool }

func (s *bigShot) CallWithInfo(ctx context.Context, _ tools.CallInfo, args json.RawMessage) (string, error) {
	return s.Call(ctx, args)
}

func (s *bigShot) CallWithImages(ctx context.Context, info tools.CallInfo, args json.RawMessage) (string, []tools.Image, error) {
	text, err := s.CallWithInfo(ctx, info, args)
	return text + "\n[image image/png, 4.0 KiB]", []tools.Image{{MIME: "image/png", Data: bytes.Repeat([]byte{'p'}, 4<<10)}}, err
}

// A tool that answers every call with images cannot make a conversation
// hold more than Options.MaxImageBytes of them (MaxConversationImageBytes,
// 16 MiB, in the bot; 16 KiB here): the results past it keep their text,
// say that their images are left out, and hand the model none.
func TestAConversationKeepsABoundedSizeOfImages(t *testing.T) {
	t.Parallel()
	reg := imageRegistry(t, &bigShot{agenttest.Tool{ToolName: "lookup"}}, &agenttest.Tool{ToolName: "deploy"})
	const bound = 16 << 10
	const calls = bound/(4<<10) + 2 // two past the bound
	model := &seenModel{Planner: agenttest.Planner{Plan: func(string) []llm.ToolCall {
		var out []llm.ToolCall
		for i := range calls {
			out = append(out, llm.ToolCall{Name: "lookup", Arguments: fmt.Sprintf(`{"n":%d}`, i)})
		}
		return out
	}}}
	a, err := agent.New(model, reg, graph.NewMemoryStore(graph.MemoryOptions{}), agent.Options{MaxImageBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Graph().Start(context.Background(), "t", agent.NewState("t", "U1", "C1", "look again and again"), graph.RunConfig{})
	if err != nil || res.Status() != graph.Done {
		t.Fatalf("Start() = %v, %v; want done", res, err)
	}
	kept, left := 0, 0
	for _, m := range res.State.Messages {
		if m.Role != llm.RoleTool {
			continue
		}
		switch {
		case len(m.Images) == 1 && !strings.Contains(m.Content, "not shown to the model"):
			kept++
		case len(m.Images) == 0 && strings.Contains(m.Content, "[image image/png, 4.0 KiB]\n[the images of this result are not shown to the model: the conversation holds the 16.0 KiB"):
			left++
		default:
			t.Errorf("a result with %d images says %q", len(m.Images), m.Content)
		}
	}
	if want := bound / (4 << 10); kept != want || left != 2 {
		t.Errorf("%d results kept their image and %d left it out; want %d and 2", kept, left, want)
	}
}

// With NoImages (LLM_IMAGES=off) an image tool is asked for its text
// only: the checkpoint keeps no image of it, and the model gets none.
func TestNoImagesAsksToolsForTextOnly(t *testing.T) {
	t.Parallel()
	reg := imageRegistry(t, &shotTool{agenttest.Tool{ToolName: "lookup"}}, &agenttest.Tool{ToolName: "deploy"})
	model := &seenModel{Planner: agenttest.Planner{Plan: func(string) []llm.ToolCall {
		return []llm.ToolCall{{Name: "lookup", Arguments: `{"n":1}`}}
	}}}
	a, err := agent.New(model, reg, graph.NewMemoryStore(graph.MemoryOptions{}), agent.Options{NoImages: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Graph().Start(context.Background(), "t", agent.NewState("t", "U1", "C1", "look"), graph.RunConfig{})
	if err != nil || res.Status() != graph.Done {
		t.Fatalf("Start() = %v, %v; want done", res, err)
	}
	for _, m := range res.State.Messages {
		if len(m.Images) > 0 || strings.Contains(m.Content, "[image image/png") {
			t.Errorf("a %s message keeps an image, or the image tool's line: %q", m.Role, m.Content)
		}
	}
}

// A person's attached images are kept with their message within the
// conversation's bound; past it they are left out, the text saying so.
func TestUserImagesKeptWithinTheBound(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(nil, &agenttest.Tool{ToolName: "lookup"})
	if err != nil {
		t.Fatal(err)
	}
	model := &seenModel{Planner: agenttest.Planner{Plan: func(string) []llm.ToolCall { return nil }}}
	a, err := agent.New(model, reg, graph.NewMemoryStore(graph.MemoryOptions{}), agent.Options{MaxImageBytes: 3 << 10})
	if err != nil {
		t.Fatal(err)
	}
	img := llm.Image{MIME: "image/png", Data: append(append([]byte(nil), screenshot...), make([]byte, 2<<10)...)}
	ctx := context.Background()
	init := a.NewStateWithImages("t", "U1", "C1", "why does this fail?", []llm.Image{img})
	if _, err := a.Graph().Start(ctx, "t", init, graph.RunConfig{}); err != nil {
		t.Fatal(err)
	}
	res, err := a.Graph().Continue(ctx, "t", a.UserTurn("U2", "and this one?", []llm.Image{img}))
	if err != nil {
		t.Fatal(err)
	}
	var users []llm.Message
	for _, m := range res.State.Messages {
		if m.Role == llm.RoleUser {
			users = append(users, m)
		}
	}
	if len(users) != 2 || len(users[0].Images) != 1 || users[0].Content != "why does this fail?" {
		t.Fatalf("user messages %+v; want the first with its image", users)
	}
	if len(users[1].Images) != 0 || !strings.HasSuffix(users[1].Content, "[the images of this message are not shown to the model: the conversation holds the 3.0 KiB of images it may keep]") {
		t.Errorf("second user message %q with %d images; want its images left out, saying so", users[1].Content, len(users[1].Images))
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	first := model.seen[0]
	if m := first[len(first)-1]; m.Role != llm.RoleUser || len(m.Images) != 1 {
		t.Errorf("the model's first call ended with a %s message with %d images; want the user's with the image", m.Role, len(m.Images))
	}
}

// imageRegistry is the tests' policy (policyYAML) over lookup, deploy
// and a plain delete tool.
func imageRegistry(t *testing.T, lookup, deploy tools.Tool) *tools.Registry {
	t.Helper()
	policy, err := tools.ParsePolicy([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(policy, lookup, deploy, &agenttest.Tool{ToolName: "delete"})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
