package llmtest

import (
	"embed"
	"testing"
)

// recordings are answers in the providers' documented wire shapes, for
// the cases a scripted llm.Message cannot express: stop reasons,
// refusals, errors inside a stream, streams cut short, and the tool-call
// deltas of OpenAI-compatible servers (vLLM repeating the id and name,
// interleaved indexes, llama-server's arguments as an object), and the
// error shapes of servers that are not OpenAI's (vLLM's and SGLang's at
// the top level, text-generation-inference's as text). Each file
// is one answer body: *.json a JSON answer, *.sse a server-sent event
// stream, replayed byte for byte.
//
//go:embed recordings
var recordings embed.FS

// Recording returns the recorded answer recordings/<name> as a Raw with
// status 200, to give a fake server with ThenRaw. An unknown name fails
// the test.
func Recording(t testing.TB, name string) Raw {
	t.Helper()
	b, err := recordings.ReadFile("recordings/" + name)
	if err != nil {
		t.Fatalf("llmtest: recording %s: %v", name, err)
	}
	return Raw{Body: string(b)}
}
