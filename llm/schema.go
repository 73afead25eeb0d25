package llm

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
)

// Tool schemas as each provider takes them.
//
// Tools reach the model with the JSON schema their server wrote, and a
// provider refuses a whole request (HTTP 400, which is not retried) for
// one schema it does not take: OpenAI a function whose parameters are an
// object without "properties", Anthropic an input_schema with oneOf,
// anyOf or allOf at the top level. One such tool would break every
// conversation. So each client passes its tools through its provider's
// normaliser first:
//
//   - a missing or null schema becomes {"type":"object","properties":{}};
//   - every object schema without "properties" gets "properties": {};
//   - a top-level allOf is merged into the object (properties and
//     required of every branch); a top-level oneOf or anyOf becomes the
//     union of its branches' properties, required only where every branch
//     requires it. That schema is looser than the original: the model is
//     offered the looser one, and the bot still validates the arguments
//     against the tool's own schema before a card is posted (the agent
//     never sees the normalised schema);
//   - a top-level "$ref" to the schema's own "$defs" or "definitions"
//     is replaced by what it points to, and so is a branch of a
//     top-level allOf, oneOf or anyOf that is such a "$ref" before its
//     properties are read (servers that generate their schemas from
//     types write the arguments, or each shape of a union, so);
//   - "$schema" and "$id" at the top level are removed;
//   - the top level gets "type": "object" when it has none.
//
// A tool that cannot be made acceptable — a schema that is not a JSON
// object, a top-level type other than object, a name outside the
// provider's pattern — is left out of the request with a warning (once
// per tool), and the conversation goes on with the other tools. Each
// result is kept per tool name and schema, so the work is done once per
// tool, not per request. ToolsLeftOut tells an operator what was left out.

// LeftOut is a tool a provider is not offered, and why.
type LeftOut struct {
	// Tool is the tool's name as the model would call it.
	Tool string
	// Reason says what the provider would refuse.
	Reason string
}

// ToolChecker is a Model that may leave tools out of its requests
// (see LeftOut). OpenAI and Anthropic clients implement it, and Retry
// forwards it.
type ToolChecker interface {
	// CheckTools returns the tools of defs the model would not be
	// offered, in the order of defs.
	CheckTools(defs []ToolDef) []LeftOut
}

// ErrSchemaRefused is why a tool is left out: its schema or name cannot
// be made into one the provider takes.
var ErrSchemaRefused = errors.New("tool schema not accepted by the provider")

// providerName is a tool name both OpenAI and Anthropic accept.
var providerName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// toolSet normalises tools for one provider and remembers the result of
// each tool, keyed by its name and schema. It is safe for concurrent use.
type toolSet struct {
	provider string
	log      logrus.FieldLogger

	mu   sync.Mutex
	seen map[[sha256.Size]byte]toolResult
}

type toolResult struct {
	def ToolDef
	err error
}

func newToolSet(provider string, log logrus.FieldLogger) *toolSet {
	if log == nil {
		l := logrus.New()
		l.Out = discard{}
		log = l
	}
	return &toolSet{provider: provider, log: log, seen: map[[sha256.Size]byte]toolResult{}}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// prepare returns the tools to send, normalised, without those the
// provider would refuse.
func (s *toolSet) prepare(defs []ToolDef) []ToolDef {
	out := make([]ToolDef, 0, len(defs))
	for _, d := range defs {
		if r := s.result(d); r.err == nil {
			out = append(out, r.def)
		}
	}
	return out
}

// leftOut returns the tools of defs prepare leaves out.
func (s *toolSet) leftOut(defs []ToolDef) []LeftOut {
	var out []LeftOut
	for _, d := range defs {
		if r := s.result(d); r.err != nil {
			out = append(out, LeftOut{Tool: d.Name, Reason: r.err.Error()})
		}
	}
	return out
}

func (s *toolSet) result(d ToolDef) toolResult {
	h := sha256.New()
	h.Write([]byte(d.Name))
	h.Write([]byte{0})
	h.Write(d.Parameters)
	var key [sha256.Size]byte
	h.Sum(key[:0])
	s.mu.Lock()
	r, ok := s.seen[key]
	s.mu.Unlock()
	if ok {
		r.def.Description = d.Description
		return r
	}
	r.def = d
	r.def.Parameters, r.err = normaliseTool(d)
	if r.err != nil {
		server, tool := splitToolName(d.Name)
		s.log.WithFields(logrus.Fields{"provider": s.provider, "tool": d.Name, "server": server, "server_tool": tool, "error": r.err}).
			Warn("tool left out: its schema is not one the provider accepts")
	}
	s.mu.Lock()
	s.seen[key] = r
	s.mu.Unlock()
	return r
}

// splitToolName splits an MCP tool's offered name, <server>__<tool>; a
// built-in tool has no server.
func splitToolName(name string) (server, tool string) {
	if i := strings.Index(name, "__"); i > 0 {
		return name[:i], name[i+2:]
	}
	return "", name
}

// normaliseTool returns the schema to send for d (see the top of this
// file). Both providers take the same form.
func normaliseTool(d ToolDef) (json.RawMessage, error) {
	if !providerName.MatchString(d.Name) {
		return nil, fmt.Errorf("%w: the name %q is not 1 to 64 of a-z, A-Z, 0-9, _ and -", ErrSchemaRefused, truncate(d.Name, 80))
	}
	return OfferedSchema(d.Parameters)
}

// OfferedSchema returns the schema of a tool's arguments as the model is
// offered it, given the schema the tool's server wrote (see the top of
// this file): its properties and required ones as the model sees them,
// wherever the original put them (inline, behind a top-level "$ref", in
// the branches of a top-level allOf, oneOf or anyOf). The error wraps
// ErrSchemaRefused for a schema no provider takes.
func OfferedSchema(parameters json.RawMessage) (json.RawMessage, error) {
	raw := bytes.TrimSpace(parameters)
	if len(raw) == 0 || string(raw) == "null" {
		return bytes.Clone(emptySchema), nil
	}
	var schema map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&schema); err != nil || schema == nil {
		return nil, fmt.Errorf("%w: the schema is not a JSON object", ErrSchemaRefused)
	}
	if err := normaliseTop(schema); err != nil {
		return nil, err
	}
	fillProperties(schema)
	out, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSchemaRefused, err)
	}
	return out, nil
}

// normaliseTop makes the top level a plain object schema.
func normaliseTop(schema map[string]any) error {
	inlineTopRef(schema)
	delete(schema, "$schema")
	delete(schema, "$id")
	switch t := schema["type"].(type) {
	case nil:
		schema["type"] = "object"
	case string:
		if t != "object" {
			return fmt.Errorf("%w: the arguments are of type %q, not an object", ErrSchemaRefused, t)
		}
	case []any:
		hasObject := false
		for _, v := range t {
			hasObject = hasObject || v == "object"
		}
		if !hasObject {
			return fmt.Errorf("%w: the arguments are not an object", ErrSchemaRefused)
		}
		schema["type"] = "object"
	default:
		return fmt.Errorf("%w: the schema's type is not a string", ErrSchemaRefused)
	}
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	required := stringSet(schema["required"])
	if branches, ok := schema["allOf"].([]any); ok {
		for _, b := range branches {
			bm := localRef(schema, b)
			for k, v := range objectProperties(bm) {
				if _, dup := props[k]; !dup {
					props[k] = v
				}
			}
			for k := range stringSet(bm["required"]) {
				required[k] = true
			}
		}
		delete(schema, "allOf")
	}
	for _, kw := range []string{"oneOf", "anyOf"} {
		branches, ok := schema[kw].([]any)
		if !ok {
			delete(schema, kw)
			continue
		}
		var inAll map[string]bool
		for _, b := range branches {
			bm := localRef(schema, b)
			for k, v := range objectProperties(bm) {
				if _, dup := props[k]; !dup {
					props[k] = v
				}
			}
			req := stringSet(bm["required"])
			if inAll == nil {
				inAll = req
				continue
			}
			for k := range inAll {
				if !req[k] {
					delete(inAll, k)
				}
			}
		}
		for k := range inAll {
			required[k] = true
		}
		delete(schema, kw)
	}
	delete(schema, "not")
	schema["properties"] = props
	if len(required) > 0 {
		names := make([]string, 0, len(required))
		for k := range required {
			if _, ok := props[k]; ok || schema["additionalProperties"] != false {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		list := make([]any, len(names))
		for i, n := range names {
			list[i] = n
		}
		schema["required"] = list
	}
	return nil
}

// maxRefHops bounds a chain of "$ref"s followed, so that a cycle ends.
const maxRefHops = 8

// localRef returns the schema v is, following "$ref"s that point into
// root's "$defs" or "definitions" ("#/$defs/Name"); nil when v is not
// an object, v itself when its "$ref" leads nowhere it can follow.
func localRef(root map[string]any, v any) map[string]any {
	node, _ := v.(map[string]any)
	for range maxRefHops {
		ref, ok := node["$ref"].(string)
		if !ok {
			return node
		}
		target := refTarget(root, ref)
		if target == nil {
			return node
		}
		node = target
	}
	return node
}

// refTarget resolves "#/$defs/Name" or "#/definitions/Name" (a JSON
// pointer of two tokens, ~0 and ~1 escaped, perhaps percent-encoded) in
// root, or returns nil.
func refTarget(root map[string]any, ref string) map[string]any {
	if u, err := url.PathUnescape(ref); err == nil {
		ref = u
	}
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	kw, name, ok := strings.Cut(rest, "/")
	if !ok || (kw != "$defs" && kw != "definitions") || strings.Contains(name, "/") {
		return nil
	}
	name = strings.NewReplacer("~1", "/", "~0", "~").Replace(name)
	defs, _ := root[kw].(map[string]any)
	target, _ := defs[name].(map[string]any)
	return target
}

// inlineTopRef replaces a top-level "$ref" into the schema's own
// definitions with the keywords of what it points to; the definitions
// stay, for the references inside them.
func inlineTopRef(schema map[string]any) {
	if _, ok := schema["$ref"].(string); !ok {
		return
	}
	target := localRef(schema, schema)
	if _, chained := target["$ref"]; chained {
		return // a cycle, or a reference it cannot follow
	}
	delete(schema, "$ref")
	for k, v := range target {
		if _, ok := schema[k]; !ok {
			schema[k] = deepCopy(v) // the definition itself stays as it was
		}
	}
}

// deepCopy copies the maps and lists of a decoded JSON value.
func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, x := range v {
			l[i] = deepCopy(x)
		}
		return l
	}
	return v
}

// objectProperties returns a branch's properties, nil when it has none.
func objectProperties(branch map[string]any) map[string]any {
	props, _ := branch["properties"].(map[string]any)
	return props
}

func stringSet(v any) map[string]bool {
	set := map[string]bool{}
	list, _ := v.([]any)
	for _, x := range list {
		if s, ok := x.(string); ok {
			set[s] = true
		}
	}
	return set
}

// fillProperties gives every object schema under s (s included) a
// "properties" member.
func fillProperties(s map[string]any) {
	if isObjectType(s["type"]) {
		if _, ok := s["properties"].(map[string]any); !ok {
			s["properties"] = map[string]any{}
		}
	}
	for _, kw := range []string{"properties", "$defs", "definitions", "patternProperties"} {
		if m, ok := s[kw].(map[string]any); ok {
			for _, v := range m {
				if sub, ok := v.(map[string]any); ok {
					fillProperties(sub)
				}
			}
		}
	}
	for _, kw := range []string{"items", "additionalProperties", "not", "if", "then", "else", "contains"} {
		if sub, ok := s[kw].(map[string]any); ok {
			fillProperties(sub)
		}
	}
	for _, kw := range []string{"oneOf", "anyOf", "allOf", "prefixItems", "items"} {
		if list, ok := s[kw].([]any); ok {
			for _, v := range list {
				if sub, ok := v.(map[string]any); ok {
					fillProperties(sub)
				}
			}
		}
	}
}

func isObjectType(t any) bool {
	switch t := t.(type) {
	case string:
		return t == "object"
	case []any:
		for _, v := range t {
			if v == "object" {
				return true
			}
		}
	}
	return false
}
