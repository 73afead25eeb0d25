package llm

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

func TestNormaliseTool(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema string
		want         string // "" when the tool is left out
	}{
		{"missing", ``, `{"type":"object","properties":{}}`},
		{"null", `null`, `{"type":"object","properties":{}}`},
		{"object without properties", `{"type":"object"}`, `{"properties":{},"type":"object"}`},
		{"no type", `{"properties":{"a":{"type":"string"}}}`, `{"properties":{"a":{"type":"string"}},"type":"object"}`},
		{"nested object without properties",
			`{"type":"object","properties":{"opts":{"type":"object"},"list":{"type":"array","items":{"type":"object"}}}}`,
			`{"properties":{"list":{"items":{"properties":{},"type":"object"},"type":"array"},"opts":{"properties":{},"type":"object"}},"type":"object"}`},
		{"meta keywords", `{"$schema":"http://json-schema.org/draft-07/schema#","$id":"x","type":"object","properties":{}}`,
			`{"properties":{},"type":"object"}`},
		{"oneOf", `{"oneOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a","c"]},{"type":"object","properties":{"b":{"type":"integer"},"c":{}},"required":["b","c"]}]}`,
			`{"properties":{"a":{"type":"string"},"b":{"type":"integer"},"c":{}},"required":["c"],"type":"object"}`},
		{"anyOf beside properties", `{"type":"object","properties":{"x":{}},"required":["x"],"anyOf":[{"required":["y"]},{"properties":{"y":{}}}]}`,
			`{"properties":{"x":{},"y":{}},"required":["x"],"type":"object"}`},
		{"allOf", `{"allOf":[{"type":"object","properties":{"a":{}},"required":["a"]},{"properties":{"b":{}},"required":["b"]}]}`,
			`{"properties":{"a":{},"b":{}},"required":["a","b"],"type":"object"}`},
		{"top-level $ref", `{"$ref":"#/$defs/Args","$defs":{"Args":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`,
			`{"$defs":{"Args":{"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}},"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}`},
		{"top-level $ref through definitions, escaped", `{"$ref":"#/definitions/a~1b%20c","definitions":{"a/b c":{"$ref":"#/definitions/D"},"D":{"properties":{"d":{}}}}}`,
			`{"definitions":{"D":{"properties":{"d":{}}},"a/b c":{"$ref":"#/definitions/D"}},"properties":{"d":{}},"type":"object"}`},
		{"anyOf of $refs", `{"type":"object","anyOf":[{"$ref":"#/$defs/A"},{"$ref":"#/$defs/B"}],"$defs":{"A":{"type":"object","properties":{"a":{"type":"string"},"n":{}},"required":["a","n"]},"B":{"properties":{"b":{"type":"integer"},"n":{}},"required":["b","n"]}}}`,
			`{"$defs":{"A":{"properties":{"a":{"type":"string"},"n":{}},"required":["a","n"],"type":"object"},"B":{"properties":{"b":{"type":"integer"},"n":{}},"required":["b","n"]}},"properties":{"a":{"type":"string"},"b":{"type":"integer"},"n":{}},"required":["n"],"type":"object"}`},
		{"$ref cycle", `{"$ref":"#/$defs/A","$defs":{"A":{"$ref":"#/$defs/B"},"B":{"$ref":"#/$defs/A"}}}`,
			`{"$defs":{"A":{"$ref":"#/$defs/B"},"B":{"$ref":"#/$defs/A"}},"$ref":"#/$defs/A","properties":{},"type":"object"}`},
		{"remote $ref kept", `{"$ref":"https://example.com/s.json"}`, `{"$ref":"https://example.com/s.json","properties":{},"type":"object"}`},
		{"type list with object", `{"type":["object","null"]}`, `{"properties":{},"type":"object"}`},
		{"big numbers kept", `{"type":"object","properties":{"n":{"type":"integer","maximum":12345678901234567890}}}`,
			`{"properties":{"n":{"maximum":12345678901234567890,"type":"integer"}},"type":"object"}`},
		{"string", `{"type":"string"}`, ""},
		{"array", `[{"type":"object"}]`, ""},
		{"not JSON", `{"type":`, ""},
		{"type not a string", `{"type":7}`, ""},
	}
	for _, tt := range tests {
		got, err := normaliseTool(ToolDef{Name: "srv__tool", Parameters: json.RawMessage(tt.schema)})
		if tt.want == "" {
			if !errors.Is(err, ErrSchemaRefused) {
				t.Errorf("%s: normaliseTool(%s) = %s, %v; want ErrSchemaRefused", tt.name, tt.schema, got, err)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: normaliseTool(%s) = %s, %v; want %s", tt.name, tt.schema, got, err, tt.want)
		}
	}
	for _, name := range []string{"", "has space", "srv.tool", string(make([]byte, 65))} {
		if _, err := normaliseTool(ToolDef{Name: name}); !errors.Is(err, ErrSchemaRefused) {
			t.Errorf("normaliseTool(name %q) = %v, want ErrSchemaRefused", name, err)
		}
	}
}

// A tool's schema is normalised once, not at every request, and a tool
// left out is reported with its name.
func TestToolSetRemembers(t *testing.T) {
	t.Parallel()
	log, hook := logtest.NewNullLogger()
	s := newToolSet("openai", log)
	defs := []ToolDef{
		{Name: "a__x", Description: "one", Parameters: json.RawMessage(`{"type":"object"}`)},
		{Name: "a__y", Parameters: json.RawMessage(`{"type":"array"}`)},
	}
	for range 3 {
		got := s.prepare(defs)
		if len(got) != 1 || got[0].Name != "a__x" || string(got[0].Parameters) != `{"properties":{},"type":"object"}` {
			t.Fatalf("prepare() = %+v", got)
		}
	}
	if len(s.seen) != 2 {
		t.Errorf("%d results kept, want 2", len(s.seen))
	}
	defs[0].Description = "two"
	if got := s.prepare(defs); got[0].Description != "two" {
		t.Errorf("description = %q, want the current one", got[0].Description)
	}
	if left := s.leftOut(defs); len(left) != 1 || left[0].Tool != "a__y" || left[0].Reason == "" {
		t.Errorf("leftOut() = %+v, want a__y with a reason", left)
	}
	entries := hook.AllEntries()
	if len(entries) != 1 || entries[0].Level != logrus.WarnLevel || entries[0].Data["tool"] != "a__y" || entries[0].Data["server"] != "a" {
		t.Errorf("logged %+v, want one warning naming the tool a__y and its server a", entries)
	}
}

// FuzzNormaliseTool: whatever a server wrote, the result is refused or
// an object schema with properties and no top-level combinator.
func FuzzNormaliseTool(f *testing.F) {
	f.Add(`{"type":"object"}`)
	f.Add(`{"oneOf":[{"properties":{"a":{}},"required":["a"]},{"required":["b"]}]}`)
	f.Add(`{"allOf":[1,{"required":[2]}],"type":["null"]}`)
	f.Add(`{"type":"object","properties":{"x":{"type":"object","items":[{"type":"object"}]}}}`)
	f.Add(`{"$ref":"#/$defs/A","$defs":{"A":{"anyOf":[{"$ref":"#/$defs/A"},{"$ref":"#/definitions/~0"}]}},"definitions":{"~":{"type":"string"}}}`)
	f.Fuzz(func(t *testing.T, schema string) {
		got, err := normaliseTool(ToolDef{Name: "t", Parameters: json.RawMessage(schema)})
		if err != nil {
			if !errors.Is(err, ErrSchemaRefused) {
				t.Fatalf("normaliseTool(%q) = %v, not ErrSchemaRefused", schema, err)
			}
			return
		}
		var top map[string]any
		if err := json.Unmarshal(got, &top); err != nil {
			t.Fatalf("normaliseTool(%q) = %s: %v", schema, got, err)
		}
		if top["type"] != "object" {
			t.Fatalf("normaliseTool(%q) = %s: type is not object", schema, got)
		}
		if _, ok := top["properties"].(map[string]any); !ok {
			t.Fatalf("normaliseTool(%q) = %s: no properties", schema, got)
		}
		for _, kw := range []string{"oneOf", "anyOf", "allOf"} {
			if _, ok := top[kw]; ok {
				t.Fatalf("normaliseTool(%q) = %s: %s at the top", schema, got, kw)
			}
		}
	})
}
