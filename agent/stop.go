package agent

import "github.com/countersign/countersign/llm"

// cutOffCall is the result of a tool call the model was still writing
// when its reply reached the length limit (llm.ToolCall.Truncated): its
// arguments are incomplete, so it never runs and nobody is asked to
// approve it; the model is told, and may ask again.
const cutOffCall = "this call was not run: your reply reached the length limit while you were writing it, " +
	"so its arguments are incomplete. Ask again with shorter arguments, or split the work into smaller calls."

// The results of a call cut off because the reply stopped for another
// reason: the context window filled, the model refused, or the
// provider's content filter withheld the rest. The call never runs
// either; the words say what stopped it, so that the model's next
// answer in the thread does not blame the length limit.
const (
	contextFullCall = "this call was not run: this conversation filled the model's context window while you were writing it, " +
		"so its arguments are incomplete."
	refusedCall = "this call was not run: the model stopped and refused to go on while writing it, " +
		"so its arguments may be incomplete."
	filteredCall = "this call was not run: the provider's content filter stopped the reply while it was being written, " +
		"so its arguments may be incomplete."
)

// cutOffResult is the result of a call cut off in a reply that stopped
// for stop.
func cutOffResult(stop llm.Stop) string {
	switch stop {
	case llm.StopContextFull:
		return contextFullCall
	case llm.StopRefused:
		return refusedCall
	case llm.StopFiltered:
		return filteredCall
	}
	return cutOffCall
}
