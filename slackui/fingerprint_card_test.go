package slackui_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/slackui"
)

func TestGraphChangedCard(t *testing.T) {
	t.Parallel()
	changes := "the tool http_request is no longer available\nthe tool <!here> changed its arguments"
	blocks := slackui.GraphChangedCard(changes, "ref-1")
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(slack.Blocks{BlockSet: blocks}); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	if sec, ok := blocks[0].(*slack.SectionBlock); ok {
		text += sec.Text.Text
	}
	for _, want := range []string{"• the tool http_request is no longer available", "&lt;!here&gt;", `"action_id":"restart_run"`, `"action_id":"cancel_run"`, "Restart from here", `"value":"ref-1"`} {
		if !strings.Contains(text, want) {
			t.Errorf("card = %s\nwant it to contain %q", text, want)
		}
	}
	if strings.Contains(text, "<!here>") {
		t.Errorf("card = %s, want the markup escaped", text)
	}
}
