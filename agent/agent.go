// Package agent is the ReAct graph that Countersign runs for a person: a
// model node that asks the model for the next turn, and a tools node that
// gives every tool call its own status, runs at once the calls that policy
// lets through, and pauses (an interrupt naming the pending calls)
// until a person has decided every other call. Decisions come back as
// state modifiers; approved calls run exactly once, each result saved
// before the next call starts; rejected and expired calls are reported to
// the model, which carries on. The model node can stream its reply
// (Options.OnStream) and saves only the complete reply; see stream.go.
//
// The package builds on graph and knows nothing of Slack or Redis; the
// runner package maps threads to runs and applies people's decisions. The
// runner that runs an agent (RunBy, which runner.New calls) hears of
// every call and is asked before each one is sent.
package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/graph"
	"github.com/countersign/countersign/internal/logtext"
	"github.com/countersign/countersign/interrupt"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/prompts"
	"github.com/countersign/countersign/tools"
)

// Node names of the agent graph.
const (
	ModelNode = "model"
	ToolsNode = "tools"
)

// ReasonApproval is the interrupt reason of a pause for decisions.
const ReasonApproval = "approval"

// Toolbox is what the agent needs from the tool registry.
type Toolbox interface {
	Lookup(name string) (tools.Tool, tools.Rule, bool)
	Tools() []tools.Tool
	Validate(name string, args json.RawMessage) error
}

// Options are the agent's optional settings.
type Options struct {
	// MaxTurns caps the model turns between two user messages (default 20).
	MaxTurns int
	// MaxCallsPerTurn caps the tool calls of one model turn (default
	// tools.DefaultMaxCallsPerTurn): the calls past it fail at once with
	// an error result, so they neither run nor wait for anyone.
	MaxCallsPerTurn int
	// ToolTimeout caps one tool call (default 2 minutes).
	ToolTimeout time.Duration
	// DefaultExpiry applies to rules without expires_after (default 24h).
	DefaultExpiry time.Duration
	// MaxImageBytes caps the image data a conversation keeps for the
	// model (default MaxConversationImageBytes).
	MaxImageBytes int
	// NoImages says the model is shown no images (LLM_IMAGES=off): tools
	// are asked for their text only (an ImageTool's CallWithInfo), so a
	// conversation keeps no images it would never send.
	NoImages bool
	// OnModel, if set, is told how long each model call took, what it
	// cost (nil when the provider did not say) and how it ended, for
	// metrics.
	OnModel func(took time.Duration, usage *llm.Usage, err error)
	// OnStream, if set, is told about the model's reply while it is
	// written (see Stream); the reply is saved only when complete. The
	// runner, if it streams, is told after it (RunBy).
	OnStream func(ctx context.Context, s *State, st Stream)
	// Graph holds the engine's options (clock, IDs, static interrupts).
	Graph graph.Options
	// Logger defaults to a logger that discards.
	Logger logrus.FieldLogger
}

// Runner is what runs the agent's threads and must hear from it:
// runner.Service. See RunBy.
type Runner interface {
	// OnCall is told about a call each time its new status has been
	// saved (running, then done or failed).
	OnCall(ctx context.Context, s *State, c Call)
	// BeforeCall is asked right before a call is sent, after the call
	// has been saved as running; an error stops the run there, the call
	// unsent and saved as approved again (Call.Unsent counts how many
	// times in a row), so that a retry of the run sends it (and nobody
	// takes it for a call whose outcome is unknown); the run fails with
	// ErrNotSent. It is the last step before the send: OnCall hears of
	// the running call before it, so that nothing that may stall stands
	// between BeforeCall's lease check and the send.
	BeforeCall(ctx context.Context, s *State, c Call) error
	// OnStream is told about the model's reply while it is written, if
	// the runner streams.
	OnStream(ctx context.Context, s *State, st Stream)
}

// InputAsker is a Runner that can pause a run for a tool's input
// requests and show them to the person asked (runner.Service with an
// Asker). With one, a call whose server needs input pauses the run (the
// call is Asking, its requests and the server's state saved with it);
// without, the tool asks during the call.
type InputAsker interface {
	AsksForInput() bool
}

// RunningSaver is a Runner that writes, with the save that marks a call
// running, what it would otherwise write in BeforeCall (runner.Service:
// the call's execution in the audit trail), where its store can do both
// in one step. The context it returns is that save's and BeforeCall's.
type RunningSaver interface {
	RunningSave(ctx context.Context, s *State, c Call) context.Context
	// NotSent is told that call c, saved running in the save whose
	// context RunningSave returned (ctx), is not sent after all: that
	// save was not confirmed durable (graph.ErrUnconfirmed). What the
	// save wrote beside the call (its execution in the audit trail) is
	// then followed by what says it was not sent.
	NotSent(ctx context.Context, s *State, c Call)
}

// Agent runs the ReAct graph. It is safe for concurrent use: one Agent
// serves every thread of a process.
//
// Who calls what. RunBy is called once, by runner.New, before any thread
// runs; it is not safe to call it while threads run. The graph's nodes
// (the model node and the tools node) run on the goroutine that started
// or resumed the thread (graph.Start, graph.Resume — the runner's, under
// the thread's lease), one node at a time per thread; any number of
// threads run at once on their own goroutines, and share only the model,
// the toolbox and the rendered-prompt cache (guarded by its mutex).
// Decide (which makes a state modifier), CheckDecision, Rule, Tools and
// ValidateArgs may be called from any goroutine; a modifier touches only
// the State it is given, on the goroutine that resumes the thread.
//
// Ordering. A turn's tool calls run one after another, in the order the
// model asked for them, each saved as running before it is sent and as
// done or failed after; the Runner hooks are called on the thread's
// goroutine in that order: OnCall (running), BeforeCall, the send,
// OnCall (done or failed). OnStream is called while the model writes,
// before the model node returns.
//
// Blocking. A model call may take as long as the provider does (with its
// retries); a tool call is cut off after Options.ToolTimeout. The Runner's
// hooks hold the thread up while they run: they must not wait for the
// thread itself (its lease is held by the caller).
type Agent struct {
	model llm.Model
	box   Toolbox
	opts  Options
	// runner and stream are set by RunBy, before any thread runs.
	runner Runner
	stream bool
	now    func() time.Time
	log    logrus.FieldLogger
	graph  *graph.Graph[State]

	// prompts keeps the system prompts rendered in the current minute
	// (the prompt tells the time to the minute), by requester and
	// channel, so a thread's turns render it once. (The tools offered
	// rarely change; a change reaches the prompt within the minute.)
	promptMu     sync.Mutex
	promptMinute time.Time
	prompts      map[[2]string]string
}

// New compiles the agent's graph over store.
func New(model llm.Model, box Toolbox, store graph.Store, opts Options) (*Agent, error) {
	if opts.MaxTurns <= 0 {
		opts.MaxTurns = 20
	}
	if opts.ToolTimeout <= 0 {
		opts.ToolTimeout = 2 * time.Minute
	}
	if opts.MaxCallsPerTurn <= 0 {
		opts.MaxCallsPerTurn = tools.DefaultMaxCallsPerTurn
	}
	if opts.DefaultExpiry <= 0 {
		opts.DefaultExpiry = 24 * time.Hour
	}
	if opts.MaxImageBytes <= 0 {
		opts.MaxImageBytes = MaxConversationImageBytes
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.Out = io.Discard
		opts.Logger = l
	}
	// Every node saves before each of its side effects (the model node
	// before the model call, the tools node before and after each call),
	// so the engine may merge the saves between them.
	opts.Graph.MergeSaves = true
	a := &Agent{model: model, box: box, opts: opts, now: opts.Graph.Now, log: opts.Logger}
	if a.now == nil {
		a.now = time.Now
	}
	gopts := fingerprinted(opts.Graph, box)
	g, err := graph.New[State]().
		AddNode(ModelNode, a.modelNode).
		AddNode(ToolsNode, a.toolsNode).
		AddEdge(graph.Start, ModelNode).
		AddConditionalEdge(ModelNode, afterModel, ToolsNode, graph.End).
		AddEdge(ToolsNode, ModelNode).
		ResumeDependsOn(pendingTools(gopts.Parts)).
		Compile(store, gopts)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.graph = g
	return a, nil
}

// RunBy makes r the agent's runner, in place of any before it: r hears
// of every call's progress, is asked before every call is sent and, if
// stream, is told about replies as they are written. runner.New calls it,
// so that a service cannot leave out one of its hooks (the check before a
// call is the lease check and the execution's audit); call it before any
// thread runs.
func (a *Agent) RunBy(r Runner, stream bool) {
	a.runner, a.stream = r, stream
}

// Graph returns the compiled graph, to start, resume and inspect threads.
func (a *Agent) Graph() *graph.Graph[State] { return a.graph }

// Model returns the model the agent calls.
func (a *Agent) Model() llm.Model { return a.model }

// NewState returns the state of a new conversation that begins with the
// requester's message.
func NewState(thread, requester, channel, text string) State {
	return State{
		Thread: thread, Requester: requester, Channel: channel,
		Messages: []llm.Message{{Role: llm.RoleUser, Content: text}},
	}
}

// NewStateWithImages is NewState for a message that comes with images
// the requester attached (see UserMessage).
func (a *Agent) NewStateWithImages(thread, requester, channel, text string, images []llm.Image) State {
	s := NewState(thread, requester, channel, "")
	s.Messages[0] = a.UserMessage(&s, text, images)
	return s
}

// UserMessage is a person's message of text, with the images they
// attached, as s is to keep it: the images are kept while the
// conversation's images stay within Options.MaxImageBytes; past it they
// are left out, a line of the text saying so. With Options.NoImages the
// images are left out too (the front end should not have fetched them).
func (a *Agent) UserMessage(s *State, text string, images []llm.Image) llm.Message {
	m := llm.Message{Role: llm.RoleUser, Content: text}
	switch {
	case len(images) == 0:
	case a.opts.NoImages:
		m.Content += "\n[the images of this message are not shown to the model: it is shown no images]"
	case imageBytes(s)+imagesSize(images) <= a.opts.MaxImageBytes:
		m.Images = images
	default:
		m.Content += fmt.Sprintf("\n[the images of this message are not shown to the model: the conversation holds the %s of images it may keep]",
			tools.Size(a.opts.MaxImageBytes))
		a.log.WithField("thread", s.Thread).Info("the conversation holds all the images it may keep; a message's are left out")
	}
	return m
}

// UserTurn returns a state modifier that adds by's message, with the
// images they attached (see UserMessage), to a finished conversation,
// for Graph.Continue. by becomes the requester of the calls the model
// makes in answer.
func (a *Agent) UserTurn(by, text string, images []llm.Image) graph.StateModifier[State] {
	return func(_ context.Context, _ graph.NodePath, s *State) error {
		s.Messages = append(s.Messages, a.UserMessage(s, text, images))
		s.PassTurns = 0
		s.TurnBy = by
		return nil
	}
}

func afterModel(s *State) []string {
	if len(s.Calls) > 0 {
		return toTools
	}
	return toEnd
}

// toTools and toEnd are afterModel's answers, made once: the graph only
// reads what a route picks.
var toTools, toEnd = []string{ToolsNode}, []string{graph.End}

// modelNode asks the model for the next turn and turns its tool calls into
// Calls, each with the status policy gives it.
func (a *Agent) modelNode(ctx context.Context, s *State, _ graph.SaveFunc) error {
	if s.PassTurns >= a.opts.MaxTurns {
		s.Messages = append(s.Messages, llm.Message{
			Role:    llm.RoleAssistant,
			Content: fmt.Sprintf("I stopped after %d steps without finishing. Reply in the thread to let me go on.", s.PassTurns),
		})
		return nil
	}
	// The prompt names the author of the turn the model answers.
	system, err := a.systemPrompt(cmp.Or(s.TurnBy, s.Requester), s.Channel)
	if err != nil {
		return err
	}
	msgs := make([]llm.Message, 0, 1+len(s.Messages)) // made once, at its size
	msgs = append(msgs, llm.Message{Role: llm.RoleSystem, Content: system})
	msgs = append(msgs, s.Messages...)
	// Nothing is saved before the call: a model call changes nothing
	// outside, every tool's outcome was saved when it ran, and a new
	// turn's text is kept by whoever handed it in until the run saves
	// (the runner's intake), so a crash here only means asking again.
	start := a.now()
	reply, err := a.generate(ctx, s, msgs)
	if a.opts.OnModel != nil {
		a.opts.OnModel(a.now().Sub(start), reply.Usage, err)
	}
	if err != nil {
		return fmt.Errorf("model %s: %w", a.model.Name(), err)
	}
	reply.Role = llm.RoleAssistant
	for i := range reply.ToolCalls {
		if reply.ToolCalls[i].ID == "" {
			reply.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", s.Turns, i)
		}
	}
	s.Messages = append(s.Messages, reply)
	s.Calls = nil
	for i, tc := range reply.ToolCalls {
		key := strconv.Itoa(s.Turns) + "." + strconv.Itoa(i)
		if i >= a.opts.MaxCallsPerTurn {
			s.Calls = append(s.Calls, tooManyCalls(key, tc, reply.Content, a.opts.MaxCallsPerTurn, len(reply.ToolCalls)))
			continue
		}
		s.Calls = append(s.Calls, a.newCall(key, tc, reply.Stop, reply.Content, cmp.Or(s.TurnBy, s.Requester)))
	}
	s.Turns++
	s.PassTurns++
	return nil
}

// newCall checks one tool call and gives it its first status. A call the
// model got wrong (an unknown tool, broken or ambiguous JSON, arguments
// against the schema, a call the policy forbids) fails at once with an
// error result the model can act on, and no one is asked to approve it.
// The arguments are kept in canonical form, which is what a card shows
// and what the tool runs with.
func (a *Agent) newCall(key string, tc llm.ToolCall, stop llm.Stop, reason, requester string) Call {
	c := Call{Key: key, ID: tc.ID, Tool: tc.Name, Reason: reason, Requester: requester}
	fail := func(format string, args ...any) Call {
		c.Status, c.IsError = Failed, true
		c.Result = "Error: " + fmt.Sprintf(format, args...)
		return c
	}
	tool, rule, ok := a.box.Lookup(tc.Name)
	if !ok {
		return fail("there is no tool named %q. Available tools: %s.", tc.Name, strings.Join(a.toolNames(), ", "))
	}
	if vt, ok := tool.(tools.VersionedTool); ok {
		c.ToolVersion = vt.Version()
	}
	if tc.Truncated {
		return fail("%s", cutOffResult(stop))
	}
	args := strings.TrimSpace(tc.Arguments)
	if args == "" {
		args = "{}"
	}
	if !json.Valid([]byte(args)) {
		return fail("the arguments are not valid JSON; send one JSON object that matches the tool's schema.")
	}
	canonical, err := tools.Canonical(json.RawMessage(args))
	if err != nil {
		return fail("%v; send one JSON object, each key once.", err)
	}
	c.Args = canonical
	if err := a.box.Validate(tc.Name, c.Args); err != nil {
		return fail("invalid arguments: %v", err)
	}
	c.Hash = tools.ArgsHash(c.Tool, c.Args)
	c.NeedsApproval = rule.NeedsApproval()
	if !c.NeedsApproval {
		c.Status = Approved
		return c
	}
	expiry := rule.ExpiresAfter
	if expiry <= 0 {
		expiry = a.opts.DefaultExpiry
	}
	c.Status, c.Since, c.Expires = Pending, a.now(), a.now().Add(expiry)
	c.Rule = &CallRule{Approvers: rule.Approvers, SelfApproval: rule.SelfApproval}
	if n := rule.Required(); n > 1 {
		c.ApprovalsRequired = n
	}
	return c
}

// tooManyCalls is a call past the cap of one turn: it fails at once, with
// no card, and the model is told why.
func tooManyCalls(key string, tc llm.ToolCall, reason string, limit, asked int) Call {
	return Call{
		Key: key, ID: tc.ID, Tool: tc.Name, Reason: reason, Status: Failed, IsError: true,
		Result: fmt.Sprintf("Error: this call was not run: one turn may ask for at most %d tool calls, and this one asked for %d. "+
			"Wait for the results of the first %d, then ask again for what is still needed.", limit, asked, limit),
	}
}

// toolsNode runs every approved call, saving before and after each, then
// either pauses for the calls still waiting for a person or hands every
// result to the model.
func (a *Agent) toolsNode(ctx context.Context, s *State, save graph.SaveFunc) error {
	// A call found running was cut off by a crash: it may or may not have
	// had its effect. Run it again only if that is harmless.
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.Status != Running {
			continue
		}
		tool, _, ok := a.box.Lookup(c.Tool)
		if ok && tool.Idempotent(c.RunArgs()) {
			c.Status = Approved
			a.log.WithFields(logrus.Fields{"thread": s.Thread, "call": c.Key, "tool": c.Tool}).Info("re-running an idempotent call cut off by a crash")
		} else {
			c.Status = Unknown
			a.log.WithFields(logrus.Fields{"thread": s.Thread, "call": c.Key, "tool": c.Tool}).Warn("call was cut off by a crash; its outcome is unknown")
		}
	}
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.Status != Approved && c.Status != Edited {
			continue
		}
		before := *c
		c.Status = Running
		c.Attempts++
		callCtx := a.runningSave(ctx, s, *c)
		if err := save(callCtx); err != nil {
			if errors.Is(err, graph.ErrUnconfirmed) {
				// Written, but not known to outlive a failover: the
				// call is not sent, and the next save says so, so
				// that nobody is asked to settle a call that never
				// went out.
				if rs, ok := a.runner.(RunningSaver); ok {
					rs.NotSent(callCtx, s, *c)
				}
				return a.unsent(ctx, s, c, before, save, err)
			}
			return err
		}
		// People hear of the call first, then BeforeCall checks the
		// lease: nothing that can stall (a slow Slack) stands between
		// the check and the send.
		a.notify(ctx, s, *c)
		if err := a.beforeCall(callCtx, s, *c); err != nil {
			return a.unsent(ctx, s, c, before, save, err)
		}
		c.Unsent = 0
		a.execute(ctx, s, c)
		ran := *c
		if !runnable(s.Calls) && s.NumWaiting() == 0 {
			// The last call of the turn: hand the results to the model
			// in the same save that records this one's outcome.
			handOver(s)
		}
		if err := save(ctx); err != nil {
			return err
		}
		a.notify(ctx, s, ran)
		if s.Calls == nil {
			return nil
		}
	}
	if waiting := s.Waiting(); len(waiting) > 0 {
		// The payload names the waiting calls; their details are in
		// the state, which the checkpoint stores beside it.
		payload, err := briefCalls(waiting)
		if err != nil {
			return err
		}
		var deadline time.Time
		for _, c := range waiting {
			if c.Expires.After(deadline) {
				deadline = c.Expires
			}
		}
		return interrupt.New(interrupt.Info{Reason: ReasonApproval, Payload: payload, Deadline: deadline})
	}
	handOver(s)
	return nil
}

// briefCalls returns the JSON of the calls' keys, IDs, tools, statuses
// and expiries: json.Marshal's of those calls with nothing else set.
func briefCalls(calls []Call) (json.RawMessage, error) {
	b := make([]byte, 0, 128*len(calls))
	b = append(b, '[')
	for i, c := range calls {
		if i > 0 {
			b = append(b, ',')
		}
		brief := Call{Key: c.Key, ID: c.ID, Tool: c.Tool, Status: c.Status, Expires: c.Expires}
		var err error
		if b, err = brief.appendJSON(b); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// runnable reports whether a call is approved and not yet run.
func runnable(calls []Call) bool {
	for _, c := range calls {
		if c.Status == Approved || c.Status == Edited {
			return true
		}
	}
	return false
}

// handOver adds the calls' results and the notes to the conversation, for
// the model's next turn, and clears them.
func handOver(s *State) {
	for _, c := range s.Calls {
		s.Messages = append(s.Messages, llm.Message{
			Role: llm.RoleTool, ToolCallID: c.ID, Name: c.Tool, Content: c.Result, IsError: c.IsError, Images: c.Images,
		})
	}
	for _, n := range s.Notes {
		s.Messages = append(s.Messages, llm.Message{
			Role:    llm.RoleUser,
			Content: fmt.Sprintf("(%s wrote in the thread while the calls waited; they may not decide them:) %s", mention(n.By), n.Text),
		})
	}
	s.Calls, s.Notes = nil, nil
}

// execute runs one call and records its outcome in c.
func (a *Agent) execute(ctx context.Context, s *State, c *Call) {
	fields := logrus.Fields{"thread": s.Thread, "call": c.Key, "tool": c.Tool}
	log := func() logrus.FieldLogger { return logtext.With(a.log, fields) } // made for a line, when there is one
	tool, _, ok := a.box.Lookup(c.Tool)
	if !ok {
		c.Status, c.IsError, c.Result = Failed, true, fmt.Sprintf("Error: the tool %q is no longer available.", c.Tool)
		return
	}
	// What runs is the tool the call was made for: a server that changed
	// the tool since (its description, schema or hints) does not get the
	// call under an approval given for the old one.
	if vt, ok := tool.(tools.VersionedTool); ok && c.ToolVersion != "" && vt.Version() != c.ToolVersion {
		c.Status, c.IsError = Failed, true
		c.Result = fmt.Sprintf("Error: the call was not run: the tool %q changed (its server now describes it differently, or changed its arguments or hints) after the call was made. Look at the tool as it is now and ask again if the call is still wanted.", c.Tool)
		log().Warn("the tool changed since the call was made; call not run")
		return
	}
	// What runs is what was approved: the hash of the arguments about to
	// run must be the one the decision claimed.
	if c.NeedsApproval && (c.Decision == nil || c.Decision.Hash != c.RunHash()) {
		c.Status, c.IsError = Failed, true
		c.Result = "Error: the call was not run: its arguments are not the ones that were approved."
		log().Error("arguments do not match the approved hash; call not run")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, a.opts.ToolTimeout)
	defer cancel()
	start := a.now()
	// A tool that asks for input asks whoever asked for this call's turn.
	info := tools.CallInfo{Thread: s.Thread, Call: c.Key, Attempt: c.Attempts, Requester: c.AskedBy(s), Channel: s.Channel, EditedBy: c.Editor(),
		CanPause: a.asksForInput()}
	if in := c.Input; in != nil && in.Answers != nil {
		info.Input = &tools.InputReply{State: in.State, Answers: in.Answers}
	}
	c.Input, c.Images = nil, nil
	result, images, err := callTool(ctx, tool, info, c.RunArgs(), !a.opts.NoImages)
	// (Looked for only after an error: the targets errors.As is given
	// are made on the heap.)
	if err != nil {
		var connect *tools.ConnectRequiredError
		if errors.As(err, &connect) && info.CanPause {
			// Nothing was sent: the run pauses until the requester connects.
			c.Status, c.Since, c.Expires = Asking, a.now(), connect.Expires
			c.Input = &CallInput{Connect: connect.Server, Of: info.Requester}
			log().WithField("mcp_server", connect.Server).Info("the requester has no connection to the tool's server; the run waits for it")
			return
		}
		var asked *tools.InputRequiredError
		if errors.As(err, &asked) && info.CanPause && len(asked.Requests) > 0 {
			// Nothing was done yet: the run pauses until the person answers.
			_, rule, _ := a.box.Lookup(c.Tool)
			expiry := cmp.Or(rule.ExpiresAfter, a.opts.DefaultExpiry)
			c.Status, c.Since, c.Expires = Asking, a.now(), a.now().Add(expiry)
			c.Input = &CallInput{Requests: asked.Requests, State: asked.State, Of: info.Requester}
			log().WithField("requests", len(asked.Requests)).Info("the tool's server asked for input; the run waits for the answer")
			return
		}
	}
	prefix := ""
	if c.Decision != nil && c.Decision.Kind == Edit {
		prefix = fmt.Sprintf("Note: %s edited the arguments before approving; the call ran with %s.\n", mention(c.Decision.By), c.EditedArgs)
	} else if editor := c.Editor(); editor != "" && c.Decision != nil {
		prefix = fmt.Sprintf("Note: %s edited the arguments, and %s approved them; the call ran with %s.\n",
			mention(editor), mentionAll(c.Decision.Approvers()), c.EditedArgs)
	}
	if errors.Is(err, tools.ErrOutcomeUnknown) && !tool.Idempotent(c.RunArgs()) {
		c.Status = Unknown
		log().WithError(err).Warn("tool call was cut off; its outcome is unknown")
		return
	}
	if err != nil {
		c.Status, c.IsError, c.Result = Failed, true, prefix+"Error: "+err.Error()
		log().WithError(err).Warn("tool call failed")
		return
	}
	c.Status, c.IsError, c.Result = Done, false, prefix+result
	if shown := modelImages(images); len(shown) > 0 && imageBytes(s)+imagesSize(shown) <= a.opts.MaxImageBytes {
		c.Images = shown // (c's own are nil until now: imageBytes counts the others')
	} else if len(shown) > 0 {
		c.Result += fmt.Sprintf("\n[the images of this result are not shown to the model: the conversation holds the %s of images it may keep]",
			tools.Size(a.opts.MaxImageBytes))
		log().Info("the conversation holds all the images it may keep; this result's are left out")
	}
	fields["duration"] = a.now().Sub(start)
	log().Info("tool call done")
}

// MaxConversationImageBytes is by default (Options.MaxImageBytes) the
// most image data a conversation keeps for the model (tools' screenshots and charts, in its checkpoints):
// past it, a result's images are left out, the result saying so. A
// request shows the model the newest images only (llm.MaxRequestImages,
// llm.MaxRequestImageBytes), but the conversation keeps every one for
// as long as the thread is kept: this bounds what a thread of
// screenshots, or a tool server that answers every call with images,
// holds in Redis.
const MaxConversationImageBytes = 16 << 20

// imageBytes is the size of the images s keeps: its messages' and its
// calls'.
func imageBytes(s *State) int {
	n := 0
	for _, m := range s.Messages {
		n += imagesSize(m.Images)
	}
	for _, c := range s.Calls {
		n += imagesSize(c.Images)
	}
	return n
}

func imagesSize(images []llm.Image) int {
	n := 0
	for _, img := range images {
		n += len(img.Data)
	}
	return n
}

// RunsAs is whose identity call c of s runs with at its tool's server
// (tools.IdentityTool), or "" when the tool acts as no one.
func (a *Agent) RunsAs(s *State, c Call) string {
	tool, _, ok := a.box.Lookup(c.Tool)
	if it, isID := tool.(tools.IdentityTool); ok && isID {
		return it.RunsAs(c.AskedBy(s))
	}
	return ""
}

// callTool runs the tool, turning a panic into an error. An ImageTool is
// asked for its images only if withImages is set.
func callTool(ctx context.Context, t tools.Tool, info tools.CallInfo, args json.RawMessage, withImages bool) (result string, images []tools.Image, err error) {
	defer func() {
		if p := recover(); p != nil {
			result, images, err = "", nil, fmt.Errorf("the tool crashed: %v", p)
		}
	}()
	if it, ok := t.(tools.ImageTool); ok && withImages {
		return it.CallWithImages(ctx, info, args)
	}
	switch t := t.(type) {
	case tools.InfoTool:
		result, err = t.CallWithInfo(ctx, info, args)
	default:
		result, err = t.Call(ctx, args)
	}
	return result, nil, err
}

// modelImages are a result's images as the conversation keeps them.
func modelImages(images []tools.Image) []llm.Image {
	if len(images) == 0 {
		return nil
	}
	out := make([]llm.Image, len(images))
	for i, img := range images {
		out[i] = llm.Image{MIME: img.MIME, Data: img.Data}
	}
	return out
}

// unsent puts back a call that was saved as running but not sent, because
// BeforeCall refused it (err): it is approved again, to be sent when the
// run is retried, rather than left running for whoever carries the run on
// to take for a call whose outcome is unknown. The restoring save is
// fenced like any other: if this run lost the thread, it fails and the
// call stays as the holder found it.
func (a *Agent) unsent(ctx context.Context, s *State, c *Call, before Call, save graph.SaveFunc, err error) error {
	c.Status, c.Attempts = before.Status, before.Attempts
	c.Unsent = before.Unsent + 1
	err = fmt.Errorf("%w: %w", ErrNotSent, err)
	log := a.log.WithFields(logrus.Fields{"thread": s.Thread, "call": c.Key, "tool": c.Tool}).WithField("reason", err.Error())
	sctx := ctx
	if errors.Is(err, graph.ErrUnconfirmed) {
		// The save that marked it running may reach a replica that
		// takes over: this one must too (graph.WithFollowUp), which
		// may take until the replicas acknowledge it: say so first.
		sctx = graph.WithFollowUp(ctx)
		log.Info("call not sent; saving it as approved again, until the replicas have that")
	}
	if serr := save(sctx); serr != nil {
		log.WithError(serr).Warn("call not sent; it could not be saved as approved again")
		return errors.Join(err, serr)
	}
	log.WithField("unsent", c.Unsent).Warn("call not sent; it is approved again, to be sent when the run is retried")
	return err
}

// runningSave returns the context of the save that marks c running.
func (a *Agent) runningSave(ctx context.Context, s *State, c Call) context.Context {
	if rs, ok := a.runner.(RunningSaver); ok {
		return rs.RunningSave(ctx, s, c)
	}
	return ctx
}

// asksForInput reports whether the runner pauses runs for input.
func (a *Agent) asksForInput() bool {
	ia, ok := a.runner.(InputAsker)
	return ok && ia.AsksForInput()
}

// beforeCall asks the runner's BeforeCall about a call.
func (a *Agent) beforeCall(ctx context.Context, s *State, c Call) error {
	if a.runner == nil {
		return nil
	}
	return a.runner.BeforeCall(ctx, s, c)
}

// notify tells the runner's OnCall about a call.
func (a *Agent) notify(ctx context.Context, s *State, c Call) {
	if a.runner != nil {
		a.runner.OnCall(ctx, s, c)
	}
}

func (a *Agent) toolNames() []string {
	var names []string
	for _, t := range a.box.Tools() {
		names = append(names, t.Name())
	}
	return names
}

func (a *Agent) toolDefs() []llm.ToolDef {
	ts := a.box.Tools()
	defs := make([]llm.ToolDef, 0, len(ts))
	for _, t := range ts {
		defs = append(defs, llm.ToolDef{Name: t.Name(), Description: t.Description(), Parameters: t.Schema()})
	}
	return defs
}

// systemPrompt returns the system prompt for a conversation of requester
// in channel, rendered once a minute at most.
func (a *Agent) systemPrompt(requester, channel string) (string, error) {
	now := a.now()
	minute := now.Truncate(time.Minute)
	key := [2]string{requester, channel}
	a.promptMu.Lock()
	if !minute.Equal(a.promptMinute) {
		a.promptMinute, a.prompts = minute, map[[2]string]string{}
	}
	p, ok := a.prompts[key]
	a.promptMu.Unlock()
	if ok {
		return p, nil
	}
	p, err := prompts.RenderSystem(prompts.System{Requester: requester, Channel: channel, Tools: a.promptTools(), Now: now})
	if err != nil {
		return "", err
	}
	a.promptMu.Lock()
	if minute.Equal(a.promptMinute) {
		a.prompts[key] = p
	}
	a.promptMu.Unlock()
	return p, nil
}

func (a *Agent) promptTools() []prompts.Tool {
	var out []prompts.Tool
	for _, t := range a.box.Tools() {
		out = append(out, prompts.Tool{Name: t.Name(), Description: t.Description()})
	}
	return out
}

// mentionAll names several people for the model.
func mentionAll(who []string) string {
	out := make([]string, len(who))
	for i, w := range who {
		out[i] = mention(w)
	}
	switch len(out) {
	case 0:
		return "someone"
	case 1:
		return out[0]
	}
	return strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1]
}

// mention names a person for the model, neutrally ("user U0BOB"): the
// conversation holds no markup of any front end, which each renders
// people its own way.
func mention(who string) string { return tools.NameID(who) }
