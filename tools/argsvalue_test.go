package tools

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// FuzzArgsValue: arguments json.Valid accepts are decoded as
// jsonschema.UnmarshalJSON decodes them, whenever argsValue does not
// give up; it gives up only on nesting deeper than it reads.
func FuzzArgsValue(f *testing.F) {
	for _, s := range []string{
		`{"method":"GET","url":"https://status.example.com/health"}`, ` { "a" : [ 1 , -2.5e+3 , 0.1E-2 , true , false , null ] } `,
		`{"n":12345678901234567890123,"s":"\u00e9\ud83d\ude00\n\"<&>","e":{},"l":[]}`, `{"a":1,"a":2}`, `"x"`, `7`, `[]`,
		"{\"bad\":\"\xff\"}", `{"s":"\ud800"}`, `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`{"a" 1}`, `{"a":1,}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		if !json.Valid(args) {
			return // Validate says why before it decodes
		}
		want, werr := jsonschema.UnmarshalJSON(bytes.NewReader(args))
		got, ok := argsValue(args)
		if !ok {
			if strings.Count(string(args), "[")+strings.Count(string(args), "{") <= maxArgsDepth {
				t.Fatalf("argsValue gave up on %q", args)
			}
			return
		}
		if werr != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("argsValue(%q) = %#v; jsonschema: %#v, %v", args, got, want, werr)
		}
	})
}
