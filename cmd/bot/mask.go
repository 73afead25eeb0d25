package main

import (
	"bytes"
	"encoding/json"

	"github.com/countersign/countersign/tools"
)

// maskedJSON is v as JSON for an operator to read, with the credentials
// in tool call arguments masked (tools.MaskSecrets): the arguments of the
// calls, which are JSON objects, and the arguments of the model's tool
// calls, which are JSON held in strings under "arguments". What Redis
// holds is not changed.
func maskedJSON(v any) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	maskArgumentStrings(doc)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return tools.MaskSecrets("", bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// maskArgumentStrings masks the JSON held in every "arguments" string of v.
func maskArgumentStrings(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok && k == "arguments" {
				x[k] = tools.MaskSecretsText("", s)
				continue
			}
			maskArgumentStrings(val)
		}
	case []any:
		for _, val := range x {
			maskArgumentStrings(val)
		}
	}
}
