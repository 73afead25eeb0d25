package slacksim

import (
	"encoding/json"
	"net/url"
	"reflect"
	"testing"

	"github.com/countersign/countersign/slackui"
	"github.com/slack-go/slack"
)

// A request for input's form, with an input of every type, submitted in
// the playground as the page reads it (text, selected values as a JSON
// array, a date, a Unix time), reaches the bot as Slack would send it:
// every answer is read back with its type.
func TestPlaygroundSubmitsEveryInputType(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{
		"name":{"type":"string"},
		"agree":{"type":"boolean"},
		"count":{"type":"integer"},
		"ratio":{"type":"number"},
		"color":{"type":"string","enum":["red","green"]},
		"tags":{"type":"array","items":{"type":"string","enum":["a","b","c"]}},
		"day":{"type":"string","format":"date"},
		"at":{"type":"string","format":"date-time"}},"required":["name"]}`)
	fields, err := slackui.ElicitFields(schema)
	if err != nil {
		t.Fatal(err)
	}
	form, err := slackui.ElicitForm("srv__tool", "Tell me.", fields, "meta")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(form)
	s := New(Options{})
	values := map[string]map[string]string{
		"field:name": {"value": "Ada"}, "field:agree": {"value": `["true"]`}, "field:count": {"value": "7"},
		"field:ratio": {"value": "0.5"}, "field:color": {"value": "green"}, "field:tags": {"value": `["a","c"]`},
		"field:day": {"value": "2026-11-26"}, "field:at": {"value": "1700000000"},
	}
	body := s.viewPayload("view_submission", User{ID: "U1", Name: "Ada"}, View{ID: "V1", View: raw}, values, "trigger")
	form2, err := url.ParseQuery(string(body))
	if err != nil {
		t.Fatal(err)
	}
	var cb slack.InteractionCallback
	if err := json.Unmarshal([]byte(form2.Get("payload")), &cb); err != nil {
		t.Fatal(err)
	}
	content, problems := slackui.ElicitContent(schema, cb.View.State)
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	want := map[string]any{"name": "Ada", "agree": true, "count": int64(7), "ratio": 0.5, "color": "green",
		"tags": []string{"a", "c"}, "day": "2026-11-26", "at": "2023-11-14T22:13:20Z"}
	if !reflect.DeepEqual(content, want) {
		t.Errorf("content = %#v\nwant %#v", content, want)
	}
}
