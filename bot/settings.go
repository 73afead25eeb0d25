package bot

// The environment variables the bot reads, and those it is given but
// does not: a misspelled setting (LLM_MODLE, BOT_POLCY) would otherwise
// leave the bot running on its defaults without a word.

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/countersign/countersign/tools"
)

// Settings are the environment variables the bot reads, in the order
// docs/configuration.md lists them. It is the one list of them: a test
// walks the program's source and fails if a variable it reads is missing
// here, or if one named here is read nowhere; another checks that the
// documentation lists each. MCP_CONFORMANCE_SCENARIO and
// MCP_CONFORMANCE_CONTEXT are set by the MCP conformance suite for
// bot mcp conformance-client only.
var Settings = []string{
	"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "SLACK_API_URL",
	"REDIS_URL", "XDG_STATE_HOME", "REDIS_CLUSTER", "REDIS_WAIT_REPLICAS",
	"LLM_PROVIDER", "LLM_MODEL", "LLM_TEMPERATURE", "LLM_REASONING_EFFORT", "LLM_THINKING_BUDGET", "LLM_IMAGES",
	"OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
	"BOT_ADDR", "BOT_POLICY", "MCP_TOKEN_KEY", "BOT_PUBLIC_URL", "AUDIT_RETENTION",
	"LOG_LEVEL", "LOG_FORMAT", "SLACK_STREAMING", "SLACK_STREAM_INTERVAL",
	"MCP_CONFORMANCE_SCENARIO", "MCP_CONFORMANCE_CONTEXT",
}

// SettingPrefixes are the prefixes of the variables the bot owns: one
// that starts with them and that the bot does not read is warned about
// (UnknownSettings). REDIS_ is not one of them: Kubernetes gives every
// container REDIS_PORT, REDIS_SERVICE_HOST and more for a Service named
// redis in its namespace, which the bot's own manifests have.
var SettingPrefixes = []string{"BOT_", "LLM_", "SLACK_", "OPENAI_", "ANTHROPIC_", "MCP_"}

// UnknownSetting is a variable of the environment that starts with one
// of SettingPrefixes and that the bot does not read.
type UnknownSetting struct {
	// Name is the variable's name as it is set. Its value is never
	// kept: it may be a secret.
	Name string
	// Suggestion is the setting it was probably meant to be (Suggest),
	// or "".
	Suggestion string
}

// String says what is wrong, in a sentence for a log line or a
// terminal: the variable's name (quoted if it holds more than letters,
// digits and underscores) and the suggestion.
func (u UnknownSetting) String() string {
	name := u.Name
	if !plainVariable.MatchString(name) {
		name = strconv.QuoteToASCII(name)
	}
	s := name + " is set, but the bot reads no such variable: it is ignored"
	if u.Suggestion != "" {
		s += "; did you mean " + u.Suggestion + "?"
	}
	return s
}

var plainVariable = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// UnknownSettings returns the variables of environ (os.Environ's
// "NAME=value" form) that start with one of SettingPrefixes (in any case)
// and that the bot does not read, in environ's order, each with its
// Suggestion. Not among them: the bot's secrets that it keeps from tool
// servers (tools.BotSecretEnv), a variable that the policy file of
// BOT_POLICY names (an MCP server's ${VAR} or inherit_env:, which read
// it; the file is read for its words only, and one that cannot be read
// is said by the wiring), and the variables Kubernetes sets for a Service
// (BOT_SERVICE_HOST, MCP_TICKETS_PORT_8080_TCP, …).
func UnknownSettings(environ []string) []UnknownSetting {
	var out []UnknownSetting
	var named map[string]bool
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if name == "" || !ownedPrefix(name) || slices.Contains(Settings, name) || tools.IsBotSecretEnv(name) || serviceLinkVar(name, value) {
			continue
		}
		if named == nil {
			named = policyWords(environ)
		}
		if named[name] {
			continue
		}
		out = append(out, UnknownSetting{Name: name, Suggestion: Suggest(name)})
	}
	return out
}

// ownedPrefix reports whether name starts with one of SettingPrefixes,
// ignoring the case of ASCII letters.
func ownedPrefix(name string) bool {
	for _, p := range SettingPrefixes {
		if len(name) >= len(p) && upperASCII(name[:len(p)]) == p {
			return true
		}
	}
	return false
}

// serviceLink matches the variables Kubernetes sets in a container for
// each Service of its namespace (enableServiceLinks, on by default): for
// a Service named mcp-tickets, MCP_TICKETS_SERVICE_HOST,
// MCP_TICKETS_SERVICE_PORT(_NAME), MCP_TICKETS_PORT and
// MCP_TICKETS_PORT_8080_TCP(_PROTO|_PORT|_ADDR). No setting ends so.
var serviceLink = regexp.MustCompile(`^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$`)

// serviceLinkVar reports whether name=value is one of the variables
// Kubernetes sets for a Service (serviceLink). Of NAME_PORT, only with
// the value Kubernetes gives it (tcp://10.0.0.1:3000): BOT_PORT=3000 is
// a person's, who meant BOT_ADDR. The value is looked at, never kept.
func serviceLinkVar(name, value string) bool {
	m := serviceLink.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	return m[1] != "PORT" || strings.Contains(value, "://")
}

// policyWords are the words (names of the form of a variable's) of the
// policy file of environ's BOT_POLICY, or none.
func policyWords(environ []string) map[string]bool {
	words := map[string]bool{}
	path := ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "BOT_POLICY="); ok {
			path = v // the first, as os.Getenv takes it
			break
		}
	}
	if path == "" {
		return words
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return words
	}
	for _, w := range policyWord.FindAll(data, -1) {
		words[string(w)] = true
	}
	return words
}

var policyWord = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// Suggest returns the setting of Settings that name was probably meant
// to be, or "". In order: the same name in another case (llm_model);
// a name another program gives a setting (otherNames: BOT_PORT);
// one at most two edits away (LLM_MODLE, SLACK_SIGNING_SECRT), the
// closest, the first listed of equals; the one setting of the same
// prefix that has the name's words in its order, and more (OPENAI_KEY,
// LLM_EFFORT); a setting that the name begins, or that begins the name,
// past its prefix (OPENAI_BASE, LLM_MODEL_NAME), the closest if one is;
// the same setting under another of the prefixes, if only one has it
// (OPENAI_MODEL), or a setting behind one (BOT_REDIS_URL).
func Suggest(name string) string {
	up := upperASCII(name)
	if i := slices.Index(Settings, up); i >= 0 {
		return Settings[i]
	}
	if s, ok := otherNames[up]; ok {
		return s
	}
	best, bestD := "", 3
	for _, s := range Settings {
		if d := editDistance(up, s, bestD); d < bestD {
			best, bestD = s, d
		}
	}
	if best != "" {
		return best
	}
	if s := wordsLeftOut(up); s != "" {
		return s
	}
	if s := prefixMatch(up); s != "" {
		return s
	}
	return samePastPrefix(up)
}

// otherNames are names other programs, or habit, give a setting of the
// bot's, that no rule of Suggest finds.
var otherNames = map[string]string{
	"BOT_PORT":        "BOT_ADDR",
	"BOT_HOST":        "BOT_ADDR",
	"BOT_LISTEN_ADDR": "BOT_ADDR",
	"SLACK_TOKEN":     "SLACK_BOT_TOKEN", // Slack's SDKs' examples
	"OPENAI_API_BASE": "OPENAI_BASE_URL", // the openai Python library before 1.0
}

// wordsLeftOut returns the one setting whose words (between
// underscores) include up's, in up's order, and more, the first the
// same: OPENAI_KEY is OPENAI_API_KEY with API left out. Of SLACK_TOKEN,
// which may be SLACK_BOT_TOKEN or SLACK_APP_TOKEN, it says neither.
func wordsLeftOut(up string) string {
	words := strings.Split(up, "_")
	if len(words) < 2 {
		return ""
	}
	found := ""
	for _, s := range Settings {
		sw := strings.Split(s, "_")
		if len(sw) <= len(words) || sw[0] != words[0] || !subsequence(words[1:], sw[1:]) {
			continue
		}
		if found != "" {
			return ""
		}
		found = s
	}
	return found
}

// subsequence reports whether every element of a is in b, in a's order.
func subsequence(a, b []string) bool {
	for _, w := range b {
		if len(a) > 0 && a[0] == w {
			a = a[1:]
		}
	}
	return len(a) == 0
}

// samePastPrefix returns the one setting that is up under another
// prefix: up without its prefix is a setting (BOT_REDIS_URL), or is
// what a single setting is without its own (OPENAI_MODEL: LLM_MODEL).
func samePastPrefix(up string) string {
	rest := stripPrefix(up)
	if rest == up || rest == "" {
		return ""
	}
	if slices.Contains(Settings, rest) {
		return rest
	}
	found := ""
	for _, s := range Settings {
		if r := stripPrefix(s); r != s && r == rest {
			if found != "" {
				return "" // OPENAI_API_KEY or ANTHROPIC_API_KEY: say neither
			}
			found = s
		}
	}
	return found
}

// prefixMatch returns the setting that up is the beginning of, or that
// is the beginning of up, up being longer than its prefix; of several,
// the closest (the difference of their lengths), if only one is.
func prefixMatch(up string) string {
	if rest := stripPrefix(up); rest == up || rest == "" {
		return ""
	}
	best, bestD, tie := "", -1, false
	for _, s := range Settings {
		if !strings.HasPrefix(s, up) && !strings.HasPrefix(up, s) {
			continue
		}
		d := max(len(s)-len(up), len(up)-len(s)) // their edit distance
		switch {
		case bestD < 0 || d < bestD:
			best, bestD, tie = s, d, false
		case d == bestD:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}

// stripPrefix is up without the first of SettingPrefixes it starts
// with, or up if none.
func stripPrefix(up string) string {
	for _, p := range SettingPrefixes {
		if rest, ok := strings.CutPrefix(up, p); ok {
			return rest
		}
	}
	return up
}

// upperASCII is s with its ASCII letters in upper case; other bytes
// stay as they are (a name is bytes, and may not be UTF-8).
func upperASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// editDistance is the Levenshtein distance of a and b in bytes, or limit
// if it is limit or more (it then stops early).
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		low := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			low = min(low, cur[j])
		}
		if low >= limit {
			return limit
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}
