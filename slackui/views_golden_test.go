package slackui_test

import (
	"encoding/json"
	"testing"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/slackui"
)

// askSchema is what an MCP server's elicitation may ask for: one input of
// each kind a form has, in the server's order.
const askSchema = `{"type":"object","properties":{
  "name":{"title":"Name","type":"string","description":"Who <!here> deploys"},
  "confirm":{"title":"Confirm","type":"boolean","default":true},
  "replicas":{"type":"integer","minimum":1,"maximum":9,"default":3},
  "ratio":{"type":"number"},
  "region":{"type":"string","enum":["eu","us"],"enumNames":["Europe","United States"]},
  "checks":{"type":"array","items":{"type":"string","enum":["smoke","load"]},"default":["smoke"]}
},"required":["name","region"]}`

// The views beside the cards: the elicitation's message and form, the
// modals a click opens before its checks are done, and the card of a run
// the updated bot cannot resume, each pinned by a golden file.
func TestViewGolden(t *testing.T) {
	t.Parallel()
	fields, err := slackui.ElicitFields(json.RawMessage(askSchema))
	if err != nil {
		t.Fatal(err)
	}
	form, err := slackui.ElicitForm("deployer__ask", "Which <@U1> region & how many?", fields, "id|ts")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		view any
	}{
		{"elicit-form", form},
		{"elicit-message", cardMessage{slackui.ElicitText("deployer__ask", "Which region?"),
			slackui.ElicitMessage(cardAsker, "deployer__ask", "Which <!here> region?", cardNow.Add(10*60e9), "elicit-id")}},
		{"modal-checking-edit", slackui.CheckingModal(slackui.ActionEdit)},
		{"modal-notice-args", slackui.NoticeModal(slackui.ActionShowArgs, "This request is no longer pending.")},
		{"card-graph-changed", cardMessage{slackui.TextGraphChanged,
			slackui.GraphChangedCard("tool deploy is gone\nthe prompt changed <!here>", cardRef)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			compareGolden(t, tt.name, tt.view)
			switch v := tt.view.(type) {
			case slack.ModalViewRequest:
				if v.CallbackID != slackui.CallbackElicit { // its inputs take Slack's default length
					checkModal(t, v)
				}
			case cardMessage:
				checkMessage(t, v.Blocks)
			}
		})
	}
}
