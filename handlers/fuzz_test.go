package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/llm/llmtest"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim/slacktest"
	"github.com/countersign/countersign/tools"
)

// FuzzInteractionPayload sends correctly signed interaction requests with
// fuzzed payloads to the server: each is answered 200 or 400, never with
// a server error or a panic, and none of them makes the agent run.
func FuzzInteractionPayload(f *testing.F) {
	for _, body := range [][]byte{
		slacktest.BlockActions(slacktest.Click{ActionID: "approve", MessageTS: "1.2", Value: "0123456789abcdef01234567"}),
		slacktest.BlockActions(slacktest.Click{ActionID: "retry_run", MessageTS: "1.2", Value: "not-a-ref"}),
		slacktest.ViewSubmission(slacktest.Submission{CallbackID: "edit_call", PrivateMetadata: "x",
			Values: map[string]map[string]string{"args": {"args_input": `{"method":`}}}),
		slacktest.ViewSubmission(slacktest.Submission{CallbackID: "reject_call", PrivateMetadata: "",
			Values: map[string]map[string]string{"reason": {"reason_input": "<!here>"}}}),
		[]byte("payload=" + url.QueryEscape(`{"type":"block_actions","user":{"id":"U1"},"actions":[{}]}`)),
		[]byte("payload=" + url.QueryEscape(`{"type":"view_submission","user":{"id":"U1"},"view":{"state":{"values":null}}}`)),
		[]byte("payload=%zz"),
		[]byte("payload=null"),
	} {
		f.Add(body)
	}
	web := slacktest.NewServer(f)
	api := slack.New("xoxb-test", slack.OptionAPIURL(web.URL()))
	store := redisstore.New(redistest.Client(f), redisstore.Options{Prefix: "fuzz-" + strconv.FormatInt(time.Now().UnixNano(), 36)})
	model := llmtest.NewScripted()
	reg, err := tools.NewRegistry(tools.DefaultPolicy(), tools.Builtins(tools.DefaultPolicy(), nil)...)
	if err != nil {
		f.Fatal(err)
	}
	a, err := agent.New(model, reg, store, agent.Options{})
	if err != nil {
		f.Fatal(err)
	}
	svc := runner.New(a, store, handlers.NewReporter(api, store, nil, nil), runner.Options{})
	const secret = "fuzz-secret"
	srv := handlers.New(api, svc, store, secret, handlers.Options{BotUserID: slacktest.BotUserID})
	f.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	handler := srv.Handler()
	signer := slacktest.NewSigner(secret)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := signer.Request(http.MethodPost, "http://bot/slack/interactions", "application/x-www-form-urlencoded", body, time.Now())
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Errorf("interaction %q answered %d %s, want 200 or 400", body, rec.Code, rec.Body)
		}
		if n := len(model.Requests()); n != 0 {
			t.Fatalf("interaction %q made the agent call the model (%d calls)", body, n)
		}
	})
}
