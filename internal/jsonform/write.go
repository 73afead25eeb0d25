package jsonform

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendKey appends a member's key and colon, after a comma unless it
// is the object's first member (b ends with its '{'). The key is
// appended as it is: a key of the caller's own, which needs no escape.
func AppendKey(b []byte, key string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// AppendStringField appends a string member tagged omitempty.
func AppendStringField(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return AppendString(AppendKey(b, key), s)
}

// AppendIntField appends an int member tagged omitempty.
func AppendIntField(b []byte, key string, n int) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(AppendKey(b, key), int64(n), 10)
}

// AppendTimeField appends a time member tagged omitzero.
func AppendTimeField(b []byte, key string, t time.Time) ([]byte, error) {
	if t.IsZero() {
		return b, nil
	}
	return AppendTime(AppendKey(b, key), t)
}

// AppendRawField appends a json.RawMessage member tagged omitempty, as
// AppendRaw appends its value.
func AppendRawField(b []byte, key string, raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return b, nil
	}
	return AppendRaw(AppendKey(b, key), raw)
}

// AppendMarshalled appends a member whose value json.Marshal writes.
func AppendMarshalled(b []byte, key string, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(AppendKey(b, key), j...), nil
}

// AppendTime appends t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds), failing where it fails.
func AppendTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return nil, err
	}
	return append(b, '"'), nil
}

// AppendRaw appends raw JSON as json.Marshal does a json.RawMessage:
// compacted, with <, >, & and U+2028, U+2029 escaped, null for nil.
// What json.Marshal wrote is already so, and is appended as it is once
// checked to be valid; the rest goes through json.Marshal, which fails
// on what is not JSON (an empty text included).
func AppendRaw(b, raw []byte) ([]byte, error) {
	if raw == nil {
		return append(b, "null"...), nil
	}
	if !isMarshalled(raw) {
		v, err := json.Marshal(json.RawMessage(raw))
		if err != nil {
			return nil, err
		}
		raw = v
	}
	return append(b, raw...), nil
}

// isMarshalled reports whether raw is one JSON value that json.Marshal
// leaves as it is (see IsCompact), in one pass: what IsCompact and
// json.Valid say together, at a few instructions a byte, where
// json.Valid's state machine takes several times that. Its false is
// not an answer: it says so of what it does not follow (containers
// nested deeper than it keeps track of), and AppendRaw then asks
// json.Marshal.
func isMarshalled(raw []byte) bool {
	var open [64]byte // the containers the value is in: '{' or '['
	depth, i, n := 0, 0, len(raw)
	var ok bool
	for {
		// A value begins at raw[i].
		if i >= n {
			return false
		}
		switch c := raw[i]; {
		case c == '"':
			if i, ok = skipString(raw, i); !ok {
				return false
			}
		case c == '{' || c == '[':
			i++
			if i < n && raw[i] == c+2 { // '}' or ']'
				i++
				break
			}
			if depth == len(open) {
				return false
			}
			open[depth] = c
			depth++
			if c == '{' {
				if i, ok = skipKey(raw, i); !ok {
					return false
				}
			}
			continue
		case c == '-' || c >= '0' && c <= '9':
			if i, ok = skipNumber(raw, i); !ok {
				return false
			}
		case c == 't':
			if i, ok = skipWord(raw, i, "true"); !ok {
				return false
			}
		case c == 'f':
			if i, ok = skipWord(raw, i, "false"); !ok {
				return false
			}
		case c == 'n':
			if i, ok = skipWord(raw, i, "null"); !ok {
				return false
			}
		default:
			return false
		}
		// A value ended before raw[i]: the containers it ends, then a
		// comma before the next value.
		for {
			if depth == 0 {
				return i == n
			}
			if i >= n {
				return false
			}
			c := raw[i]
			i++
			if c == open[depth-1]+2 {
				depth--
				continue
			}
			if c != ',' {
				return false
			}
			if open[depth-1] == '{' {
				if i, ok = skipKey(raw, i); !ok {
					return false
				}
			}
			break
		}
	}
}

// skipKey returns where the value of the member whose key begins at
// raw[i] begins.
func skipKey(raw []byte, i int) (int, bool) {
	if i >= len(raw) || raw[i] != '"' {
		return i, false
	}
	i, ok := skipString(raw, i)
	if !ok || i >= len(raw) || raw[i] != ':' {
		return i, false
	}
	return i + 1, true
}

// passes marks the bytes a string's JSON holds as they are, that
// json.Marshal keeps as they are: all but control characters, the
// quote and backslash, the characters it escapes (<, > and &) and 0xE2,
// which begins U+2028 and U+2029 (and other characters: see IsCompact).
var passes = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = true
	}
	for _, c := range []byte{'"', '\\', '<', '>', '&', 0xE2} {
		t[c] = false
	}
	return t
}()

// skipString returns the end of the string that begins at raw[i].
func skipString(raw []byte, i int) (int, bool) {
	n := len(raw)
	for i++; i < n; {
		c := raw[i]
		if passes[c] {
			i++
			continue
		}
		switch c {
		case '"':
			return i + 1, true
		case '\\':
			if i+1 >= n {
				return i, false
			}
			switch raw[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > n || !isHex(raw[i+2]) || !isHex(raw[i+3]) || !isHex(raw[i+4]) || !isHex(raw[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		default:
			return i, false
		}
	}
	return i, false
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// skipNumber returns the end of the number that begins at raw[i].
func skipNumber(raw []byte, i int) (int, bool) {
	n := len(raw)
	if raw[i] == '-' {
		i++
	}
	switch {
	case i < n && raw[i] == '0':
		i++
	case i < n && raw[i] >= '1' && raw[i] <= '9':
		i = skipDigits(raw, i+1)
	default:
		return i, false
	}
	if i < n && raw[i] == '.' {
		j := skipDigits(raw, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < n && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		if i < n && (raw[i] == '+' || raw[i] == '-') {
			i++
		}
		j := skipDigits(raw, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func skipDigits(raw []byte, i int) int {
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		i++
	}
	return i
}

// skipWord returns the end of word, which begins at raw[i] if it is there.
func skipWord(raw []byte, i int, word string) (int, bool) {
	if len(raw)-i < len(word) || string(raw[i:i+len(word)]) != word {
		return i, false
	}
	return i + len(word), true
}

// IsCompact reports whether raw has nothing json.Marshal would change
// in it: no white space outside strings, and none of the bytes it
// escapes (0xE2 begins U+2028 and U+2029, and other characters).
func IsCompact(raw []byte) bool {
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case c == '<' || c == '>' || c == '&' || c == 0xE2:
			return false
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return true
}

// AppendStrings appends a list of strings as an array.
func AppendStrings(b []byte, list []string) []byte {
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

// asIs marks the bytes AppendString writes as they are: ASCII but
// control characters, the quote and backslash, <, > and &.
var asIs = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range []byte{'"', '\\', '<', '>', '&'} {
		t[c] = false
	}
	return t
}()

// AppendString appends s quoted as json.Marshal quotes it: with <, >
// and & escaped, U+2028 and U+2029 escaped, and each byte that is not
// UTF-8 replaced by U+FFFD.
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if asIs[s[i]] {
			i++
			continue
		}
		if c := s[i]; c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default: // other control characters, <, > and &
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
