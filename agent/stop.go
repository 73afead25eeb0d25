package agent

// cutOffCall is the result of a tool call the model was still writing
// when its reply reached the length limit (llm.ToolCall.Truncated): its
// arguments are incomplete, so it never runs and nobody is asked to
// approve it; the model is told, and may ask again.
const cutOffCall = "this call was not run: your reply reached the length limit while you were writing it, " +
	"so its arguments are incomplete. Ask again with shorter arguments, or split the work into smaller calls."
