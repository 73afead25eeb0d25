package graph

import (
	"context"
	"encoding/json"
	"testing"
)

type fuzzDoc struct {
	Lines []string `json:"lines"`
}

// FuzzNestedCheckpoint: a subgraph's checkpoint, as a parent's checkpoint
// holds it, may be anything a store hands back. Decoding it, answering it
// and going on with it return errors; they never panic.
func FuzzNestedCheckpoint(f *testing.F) {
	inner, err := New[fuzzDoc]().
		AddNode("a", func(_ context.Context, d *fuzzDoc, _ SaveFunc) error { d.Lines = append(d.Lines, "a"); return nil }).
		AddEdge(Start, "a").
		Compile(NewMemoryStore(MemoryOptions{}), Options{})
	if err != nil {
		f.Fatal(err)
	}
	sub := Nest(inner, func(*fuzzDoc) fuzzDoc { return fuzzDoc{} }, func(p *fuzzDoc, d *fuzzDoc) { p.Lines = append(p.Lines, d.Lines...) }).subgraph()
	for _, seed := range []string{
		`{"v":2,"thread":"","id":"x","seq":1,"step":0,"status":"running","next":["a"],"state":{"lines":[]},"journal_len":0,"created":"2026-01-01T00:00:00Z"}`,
		`{"v":2,"status":"paused","next":["a"],"interrupts":[{"id":"0:a","path":["a"],"reason":"r"}],"state":{}}`,
		`{"v":1,"status":"failed","next":["a","zz"],"writes":[{"node":"a","state":{}}],"state":{}}`,
		`{"v":2,"status":"paused","interrupts":[{"id":"1:a","path":[]}],"state":null}`,
		`{"v":9}`, `null`, `[]`, ``, `{"state":"x"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ctx := context.Background()
		_, _ = sub.answerNested(ctx, raw, nil, nil, NodePath{"doc"})
		_, _ = sub.answerNested(ctx, raw, []string{"0:a"}, nil, NodePath{"doc"})
		var parent fuzzDoc
		_ = sub.runNested(ctx, &parent, raw, func(json.RawMessage) {}, func(context.Context) error { return nil })
	})
}
