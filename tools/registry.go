package tools

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// ErrUnknownTool is returned for a tool the registry does not offer.
var ErrUnknownTool = errors.New("unknown tool")

// toolNamePattern is what model providers accept as a function name.
var toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Registry holds the tools offered to the model, each with its policy
// rule and compiled argument schema. It does not change after
// construction and is safe for concurrent use.
type Registry struct {
	entries map[string]entry
	tools   []Tool // offered tools, sorted by name
	printer *message.Printer
}

type entry struct {
	tool   Tool
	rule   Rule
	schema *jsonschema.Schema
}

// NewRegistry offers the tools that the policy allows: all of them under
// the default policy (or a nil one), only the listed ones under a policy
// file. It is an error for the policy to list a tool that is not among
// ts, for two tools to share a name, and for a tool's schema not to
// compile.
func NewRegistry(p *Policy, ts ...Tool) (*Registry, error) {
	if p == nil {
		p = DefaultPolicy()
	}
	byName := make(map[string]Tool, len(ts))
	for _, t := range ts {
		name := t.Name()
		if !toolNamePattern.MatchString(name) {
			return nil, fmt.Errorf("tool %q: name must be 1 to 64 letters, digits, _ or -", name)
		}
		if _, dup := byName[name]; dup {
			return nil, fmt.Errorf("tool %q is registered twice", name)
		}
		byName[name] = t
	}
	for _, name := range slices.Sorted(maps.Keys(p.Tools)) {
		if _, ok := byName[name]; !ok {
			if _, mcp := p.mcpServerFor(name); mcp {
				continue // an MCP server's tools are known once it answers
			}
			return nil, fmt.Errorf("policy lists tool %q, which does not exist (tools: %s)",
				name, strings.Join(slices.Sorted(maps.Keys(byName)), ", "))
		}
	}

	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	r := &Registry{
		entries: map[string]entry{},
		printer: message.NewPrinter(language.English),
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		t := byName[name]
		// Every schema is compiled, offered or not, so that a broken
		// tool is found whatever the policy.
		schema, err := compileSchema(c, name, t.Schema())
		if err != nil {
			return nil, fmt.Errorf("tool %q: schema: %w", name, err)
		}
		rule, ok := p.RuleFor(name)
		if !ok {
			continue
		}
		if _, explicit := p.Tools[name]; !explicit {
			if ro, ok := t.(ReadOnlyTool); ok && ro.ReadOnly() {
				rule.Approval = ApprovalNever
			}
		}
		r.entries[name] = entry{tool: t, rule: rule, schema: schema}
		r.tools = append(r.tools, t)
	}
	return r, nil
}

func compileSchema(c *jsonschema.Compiler, name string, schema json.RawMessage) (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(schema)) == 0 {
		return nil, errors.New("empty")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	url := "https://countersign.invalid/tools/" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// noLoader keeps schema references inside the tool's own schema: nothing
// is fetched from files or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema %s: only references within the tool's schema are supported", url)
}

// Lookup returns an offered tool and its rule.
func (r *Registry) Lookup(name string) (Tool, Rule, bool) {
	e, ok := r.entries[name]
	rule := e.rule
	rule.Approvers = slices.Clone(rule.Approvers)
	rule.AllowHosts = slices.Clone(rule.AllowHosts)
	return e.tool, rule, ok
}

// Tools returns the offered tools, sorted by name.
func (r *Registry) Tools() []Tool {
	return slices.Clone(r.tools)
}

// Validate checks arguments for the named tool: they must be one JSON
// value that matches the tool's schema. A tool that is not offered gives
// ErrUnknownTool; bad arguments give an *ArgsError.
func (r *Registry) Validate(name string, args json.RawMessage) error {
	e, ok := r.entries[name]
	if !ok {
		return fmt.Errorf("tool %q: %w", name, ErrUnknownTool)
	}
	if len(bytes.TrimSpace(args)) == 0 {
		return &ArgsError{Problems: []ArgsProblem{{Message: "empty; want a JSON object"}}}
	}
	if !json.Valid(args) { // no copy of args when they are valid, as they mostly are
		var raw json.RawMessage
		err := json.Unmarshal(args, &raw)
		return &ArgsError{Problems: []ArgsProblem{{Message: jsonSyntaxMessage(args, err)}}}
	}
	// Decoded again with json.Number, so that large numbers keep
	// their precision in the schema's checks: as jsonschema decodes
	// them, by argsValue if it can.
	inst, ok := argsValue(args)
	if !ok {
		var err error
		if inst, err = jsonschema.UnmarshalJSON(bytes.NewReader(args)); err != nil {
			return &ArgsError{Problems: []ArgsProblem{{Message: "invalid JSON: " + err.Error()}}}
		}
	}
	err := e.schema.Validate(inst)
	var verr *jsonschema.ValidationError
	if errors.As(err, &verr) {
		return &ArgsError{Problems: r.schemaProblems(verr, inst)}
	}
	if err != nil {
		return err
	}
	if c, ok := e.tool.(Checker); ok {
		return c.Check(args)
	}
	return nil
}

// ArgsError reports arguments that are not valid JSON or do not match the
// tool's schema. Its text is written for the person editing the arguments:
//
//	method: value must be one of 'GET', 'HEAD', …; url: missing property
type ArgsError struct {
	Problems []ArgsProblem
}

// ArgsProblem is one thing wrong with the arguments.
type ArgsProblem struct {
	// Path says where, e.g. "url", "headers.Accept" or "items[2]"; empty
	// for the arguments as a whole.
	Path string
	// Message says what, e.g. "missing property".
	Message string
}

// maxShownProblems keeps an ArgsError short enough for a modal.
const maxShownProblems = 5

func (e *ArgsError) Error() string {
	parts := make([]string, 0, maxShownProblems+1)
	for i, p := range e.Problems {
		if i == maxShownProblems {
			parts = append(parts, fmt.Sprintf("and %d more", len(e.Problems)-i))
			break
		}
		if p.Path == "" {
			parts = append(parts, "arguments: "+p.Message)
		} else {
			parts = append(parts, p.Path+": "+p.Message)
		}
	}
	return strings.Join(parts, "; ")
}

// jsonSyntaxMessage turns a JSON syntax error into "invalid JSON at line
// L, column C: …", which points into a multi-line modal text.
func jsonSyntaxMessage(data []byte, err error) string {
	var serr *json.SyntaxError
	if !errors.As(err, &serr) {
		return "invalid JSON: " + err.Error()
	}
	// Offset counts the bytes read, the offending one included.
	pos := min(max(int(serr.Offset)-1, 0), len(data))
	line := 1 + bytes.Count(data[:pos], []byte("\n"))
	col := pos - bytes.LastIndexByte(data[:pos], '\n')
	return fmt.Sprintf("invalid JSON at line %d, column %d: %s", line, col, strings.TrimPrefix(serr.Error(), "json: "))
}

// schemaProblems flattens a schema validation error to its leaves, each
// with a readable path into the arguments.
func (r *Registry) schemaProblems(verr *jsonschema.ValidationError, inst any) []ArgsProblem {
	var out []ArgsProblem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		loc := e.InstanceLocation
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, m := range k.Missing {
				out = append(out, ArgsProblem{Path: instancePath(inst, append(slices.Clone(loc), m)), Message: "missing property"})
			}
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				out = append(out, ArgsProblem{Path: instancePath(inst, append(slices.Clone(loc), p)), Message: "unknown property"})
			}
		case *kind.Type:
			out = append(out, ArgsProblem{Path: instancePath(inst, loc), Message: fmt.Sprintf("must be %s, not %s", strings.Join(k.Want, " or "), k.Got)})
		case *kind.FalseSchema:
			out = append(out, ArgsProblem{Path: instancePath(inst, loc), Message: "not allowed"})
		default:
			out = append(out, ArgsProblem{Path: instancePath(inst, loc), Message: k.LocalizedString(r.printer)})
		}
	}
	walk(verr)
	slices.SortStableFunc(out, func(a, b ArgsProblem) int { return cmp.Compare(a.Path, b.Path) })
	return slices.Compact(out)
}

// instancePath renders a location in the arguments as a.b[2].c, using the
// value to tell array indexes from object keys.
func instancePath(inst any, tokens []string) string {
	var sb strings.Builder
	cur := inst
	for _, tok := range tokens {
		switch v := cur.(type) {
		case []any:
			sb.WriteString("[" + tok + "]")
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(v) {
				cur = v[i]
			} else {
				cur = nil
			}
		case map[string]any:
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(tok)
			cur = v[tok]
		default:
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(tok)
			cur = nil
		}
	}
	return sb.String()
}
