package handlers

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/slack-go/slack"
)

// everythingSchema is a part of what server-everything asks for.
const everythingSchema = `{"type":"object","properties":{
  "name":{"title":"String","type":"string","description":"Your full, legal name"},
  "check":{"title":"Boolean","type":"boolean"},
  "integer":{"title":"Integer","type":"integer","minimum":1,"maximum":100,"default":42},
  "number":{"type":"number","default":3.14},
  "friend":{"type":"string","enum":["Monica","Rachel"],"default":"Monica"},
  "hero":{"type":"string","oneOf":[{"const":"hero-1","title":"Superman"},{"const":"hero-2","title":"Wonder Woman"}]},
  "instruments":{"type":"array","items":{"type":"string","enum":["Guitar","Piano"]},"default":["Guitar"]}
},"required":["name"]}`

func TestElicitForm(t *testing.T) {
	view, err := ElicitForm("everything__ask", "Please <!here> provide", json.RawMessage(everythingSchema), "id|ts")
	if err != nil {
		t.Fatal(err)
	}
	if view.CallbackID != CallbackElicit || view.PrivateMetadata != "id|ts" {
		t.Errorf("view = %s/%s, want the elicitation callback and metadata", view.CallbackID, view.PrivateMetadata)
	}
	var got []string
	for _, b := range view.Blocks.BlockSet[1:] {
		in := b.(*slack.InputBlock)
		kind := string(in.Element.ElementType())
		if !in.Optional {
			kind += " required"
		}
		got = append(got, in.BlockID+" "+kind)
	}
	want := []string{
		"field:name plain_text_input required", "field:check checkboxes", "field:integer number_input",
		"field:number number_input", "field:friend static_select", "field:hero static_select", "field:instruments multi_static_select",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("form inputs = %q\nwant %q", got, want)
	}
	intro := view.Blocks.BlockSet[0].(*slack.SectionBlock).Text.Text
	if intro != "`everything__ask` asks:\nPlease &lt;!here&gt; provide" {
		t.Errorf("form intro = %q, want the message escaped", intro)
	}
}

func TestElicitContent(t *testing.T) {
	state := func(values map[string]slack.BlockAction) *slack.ViewState {
		s := &slack.ViewState{Values: map[string]map[string]slack.BlockAction{}}
		for block, a := range values {
			s.Values[ElicitBlockPrefix+block] = map[string]slack.BlockAction{ElicitActionID: a}
		}
		return s
	}
	tests := []struct {
		name     string
		values   map[string]slack.BlockAction
		want     map[string]any
		problems map[string]string
	}{
		{"typed", map[string]slack.BlockAction{
			"name":        {Value: "Ada"},
			"check":       {SelectedOptions: []slack.OptionBlockObject{{Value: "true"}}},
			"integer":     {Value: "7"},
			"number":      {Value: "2.5"},
			"hero":        {SelectedOption: slack.OptionBlockObject{Value: "hero-2"}},
			"instruments": {SelectedOptions: []slack.OptionBlockObject{{Value: "Piano"}}},
		}, map[string]any{"name": "Ada", "check": true, "integer": int64(7), "number": 2.5, "hero": "hero-2", "instruments": []string{"Piano"}}, nil},
		{"unchecked box is false", map[string]slack.BlockAction{"name": {Value: "Ada"}}, map[string]any{"name": "Ada", "check": false}, nil},
		{"missing required", map[string]slack.BlockAction{}, nil, map[string]string{"field:name": "missing property"}},
		{"out of range", map[string]slack.BlockAction{"name": {Value: "A"}, "integer": {Value: "500"}}, nil, map[string]string{"field:integer": "maximum: got 500, want 100"}},
		{"not a number", map[string]slack.BlockAction{"name": {Value: "A"}, "number": {Value: "many"}}, nil, map[string]string{"field:number": "Enter a number."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := ElicitContent(json.RawMessage(everythingSchema), state(tt.values))
			if !reflect.DeepEqual(problems, tt.problems) && !(len(problems) == 0 && len(tt.problems) == 0) {
				t.Errorf("problems = %q, want %q", problems, tt.problems)
			}
			if tt.want != nil && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("content = %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func FuzzElicitForm(f *testing.F) {
	f.Add(everythingSchema)
	f.Add(`{"type":"object","properties":{"a":{"type":"array","items":{"anyOf":[{"const":1,"title":"One"}]}}}}`)
	f.Add(`{"properties":[]}`)
	f.Fuzz(func(t *testing.T, schema string) {
		view, err := ElicitForm("t", "m", json.RawMessage(schema), "x")
		if err != nil {
			return
		}
		if len(view.Blocks.BlockSet) > 100 {
			t.Errorf("form has %d blocks", len(view.Blocks.BlockSet))
		}
		ElicitContent(json.RawMessage(schema), &slack.ViewState{})
	})
}
