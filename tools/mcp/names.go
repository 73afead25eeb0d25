package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"

	"github.com/countersign/countersign/tools"
)

// maxToolName is the longest function name the model providers accept
// (OpenAI and Anthropic: 64 of [a-zA-Z0-9_-]).
const maxToolName = 64

var notNameChar = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// ToolName is how the model calls a server's tool: <server>__<tool>. When
// the tool's name has characters the providers refuse, or the whole is
// longer than 64, the invalid characters become _ and the name is cut,
// ending with _ and 8 hex digits of the SHA-256 of the tool's own name,
// so that the name stays the same from one start to the next and two
// tools whose names differ only where they were cut stay apart.
func ToolName(server, tool string) string {
	name := server + tools.MCPToolSeparator + tool
	clean := notNameChar.ReplaceAllString(name, "_")
	if clean == name && len(name) <= maxToolName {
		return name
	}
	sum := sha256.Sum256([]byte(tool))
	suffix := "_" + hex.EncodeToString(sum[:4])
	if len(clean) > maxToolName-len(suffix) {
		clean = clean[:maxToolName-len(suffix)]
	}
	return clean + suffix
}
