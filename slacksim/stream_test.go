package slacksim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack"

	"github.com/countersign/countersign/agent"
	"github.com/countersign/countersign/handlers"
	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/redisstore"
	"github.com/countersign/countersign/redisstore/redistest"
	"github.com/countersign/countersign/runner"
	"github.com/countersign/countersign/slacksim"
	"github.com/countersign/countersign/tools"
)

// TestPlaygroundShowsTheAnswerGrow: the page, listening on /events as
// the browser does, sees the demo model's answer grow word by word in one
// message, with the streaming flag while it grows, then the whole answer
// once.
func TestPlaygroundShowsTheAnswerGrow(t *testing.T) {
	secret, token := randomHex(16), "xoxb-"+randomHex(8)
	store := redisstore.New(redistest.Client(t), redisstore.Options{Prefix: "playground-stream-" + randomHex(4)})
	policy := tools.DefaultPolicy()
	reg, err := tools.NewRegistry(policy, tools.Builtins(policy, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.Out = io.Discard
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	sim := slacksim.New(slacksim.Options{
		BotURL: srv.URL, SigningSecret: secret, BotToken: token,
		TeamID: "T" + strings.ToUpper(randomHex(5)), Logger: log,
		Client: &http.Client{Timeout: 20 * time.Second},
	})
	api := slack.New(token, slack.OptionAPIURL(srv.URL+"/api/"))
	rep := handlers.NewReporter(api, store, nil, log)
	rep.SetStreaming(handlers.StreamOptions{Interval: time.Millisecond})
	var svc *runner.Service
	a, err := agent.New(&llm.Demo{Pause: 5 * time.Millisecond}, reg, store, agent.Options{
		OnStream: func(ctx context.Context, s *agent.State, st agent.Stream) { svc.OnStream(ctx, s, st) },
	})
	if err != nil {
		t.Fatal(err)
	}
	svc = runner.New(a, store, rep, runner.Options{Schedule: true, Audit: true})
	bot := handlers.New(api, svc, store, secret, handlers.Options{BotUserID: slacksim.DefaultBotUserID})
	mux.Handle("/api/", sim.APIHandler())
	mux.Handle("/slack/", bot.Handler())
	mux.Handle("/", sim.PageHandler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = bot.Shutdown(ctx)
		sim.Close()
	})

	// The page's event stream.
	resp, err := http.Get(srv.URL + "/events?token=" + sim.PageToken())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := make(chan slacksim.Message, 1000)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				event = e
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok && event == "message" {
				var m slacksim.Message
				if json.Unmarshal([]byte(d), &m) == nil {
					events <- m
				}
			}
		}
	}()

	body, _ := json.Marshal(map[string]any{"user": you, "text": "/agent hello"})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/ui/send", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(slacksim.TokenHeader, sim.PageToken())
	if r, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else if r.Body.Close(); r.StatusCode != http.StatusOK {
		t.Fatalf("POST /ui/send = %d", r.StatusCode)
	}

	want, _ := llm.NewDemo().Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hello"}}, nil)
	var seen []string
	answerTS := ""
	deadline := time.After(20 * time.Second)
	for done := false; !done; {
		select {
		case m, ok := <-events:
			if !ok {
				t.Fatal("the page's event stream ended")
			}
			if m.ThreadTS == "" || m.User != slacksim.DefaultBotUserID || strings.Contains(m.Text, "asked:") {
				continue
			}
			if answerTS == "" {
				answerTS = m.TS
			}
			if m.TS != answerTS {
				t.Fatalf("the answer appeared in a second message %s: %q", m.TS, m.Text)
			}
			if len(seen) == 0 || seen[len(seen)-1] != m.Text {
				seen = append(seen, m.Text)
			}
			if !m.Streaming && strings.TrimSpace(m.Text) == strings.TrimSpace(want.Content) {
				done = true
			} else if !m.Streaming && len(seen) > 1 {
				t.Fatalf("the stream stopped with %q", m.Text)
			}
		case <-deadline:
			t.Fatalf("the page did not see the whole answer; it saw %q", seen)
		}
	}
	if len(seen) < 5 {
		t.Errorf("the page saw %d versions of the answer, want it to grow word by word", len(seen))
	}
	for i := 1; i < len(seen); i++ {
		if !strings.HasPrefix(seen[i], strings.TrimSpace(seen[i-1])) {
			t.Errorf("version %d %q does not extend %q", i, seen[i], seen[i-1])
		}
	}
	var answers int
	for _, m := range sim.State().Messages {
		if m.ThreadTS != "" && m.User == slacksim.DefaultBotUserID && m.Text == want.Content {
			answers++
		}
	}
	if answers != 1 {
		t.Errorf("the thread shows the answer %d times, want once", answers)
	}
}
