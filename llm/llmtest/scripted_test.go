package llmtest_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/countersign/countersign/llm"
	"github.com/countersign/countersign/llm/llmtest"
)

var _ llm.Model = (*llmtest.Scripted)(nil)

func TestScriptedInOrder(t *testing.T) {
	boom := errors.New("boom")
	call := llmtest.Call("c1", "http_request", `{"url":"https://a.example"}`)
	m := llmtest.NewScripted(llmtest.Reply("first", call), llm.Message{Content: "role defaults to assistant"}).
		ThenError(boom).
		ThenFunc(func(_ context.Context, msgs []llm.Message, tools []llm.ToolDef) (llm.Message, error) {
			return llmtest.Reply("saw " + msgs[len(msgs)-1].Content), nil
		})
	ctx := context.Background()
	tools := []llm.ToolDef{{Name: "http_request"}}
	msgs := []llm.Message{{Role: llm.RoleUser, Content: "one"}}

	tests := []struct {
		want    llm.Message
		wantErr error
	}{
		{want: llmtest.Reply("first", call)},
		{want: llmtest.Reply("role defaults to assistant")},
		{wantErr: boom},
		{want: llmtest.Reply("saw one")},
		{wantErr: llmtest.ErrScriptExhausted},
	}
	for i, tt := range tests {
		got, err := m.Generate(ctx, msgs, tools)
		if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
			t.Fatalf("call %d: Generate() error = %v, want %v", i, err, tt.wantErr)
		}
		if tt.wantErr == nil && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("call %d: Generate() = %+v, want %+v", i, got, tt.want)
		}
	}
	reqs := m.Requests()
	if len(reqs) != len(tests) {
		t.Fatalf("Requests() has %d entries, want %d", len(reqs), len(tests))
	}
	if !reflect.DeepEqual(reqs[0], llmtest.Request{Messages: msgs, Tools: tools}) {
		t.Errorf("Requests()[0] = %+v, want the request", reqs[0])
	}
	if m.Remaining() != 0 {
		t.Errorf("Remaining() = %d, want 0", m.Remaining())
	}
}

func TestScriptedRecordsCopies(t *testing.T) {
	m := llmtest.NewScripted(llmtest.Reply("ok"))
	msgs := []llm.Message{{Role: llm.RoleUser, Content: "original"}}
	if _, err := m.Generate(context.Background(), msgs, nil); err != nil {
		t.Fatal(err)
	}
	msgs[0].Content = "changed later"
	if got := m.Requests()[0].Messages[0].Content; got != "original" {
		t.Errorf("recorded message = %q, want %q", got, "original")
	}
}

func TestScriptedConcurrent(t *testing.T) {
	const n = 50
	m := llmtest.NewScripted()
	for range n {
		m.Then(llmtest.Reply("ok"))
	}
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	for range n + 1 {
		wg.Go(func() {
			if _, err := m.Generate(context.Background(), []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	var failed int
	for err := range errs {
		if !errors.Is(err, llmtest.ErrScriptExhausted) {
			t.Errorf("Generate() error = %v, want only ErrScriptExhausted", err)
		}
		failed++
	}
	if failed != 1 || len(m.Requests()) != n+1 {
		t.Errorf("%d calls failed and %d were recorded, want 1 and %d", failed, len(m.Requests()), n+1)
	}
}
