// Package logtext writes the bot's text log lines: byte for byte what
// logrus's TextFormatter (with FullTimestamp) writes, without the work
// it does for options the bot does not set. TextFormatter copies each
// line's fields into a map of its own, lists and sorts their keys in
// slices it makes, formats the time into a string and quotes values
// rune by rune; the bot logs a few lines for each approval, and that was
// most of what a line cost. A Formatter writes a line's fields sorted
// from an array on the stack, the time straight into the line, and a
// value of printable ASCII between quotes as it is, which is what
// strconv quotes it to.
//
// Lines it does not write itself go to the TextFormatter it holds: those
// written in colour (the logger writes to a terminal), those with the
// caller reported, with a field named like one of the line's own (time,
// level, msg, logrus_error), with a field logrus dropped (logrus_error),
// with more fields than it sorts on the stack, and a value whose String
// or Error method panics. The JSON format (LOG_FORMAT=json) is logrus's
// own.
package logtext

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Formatter is a logrus.Formatter. Its zero value is not ready: use New.
// It is safe for concurrent use, as logrus calls it.
type Formatter struct {
	text *logrus.TextFormatter
	// colored is whether text writes this logger's lines in colour,
	// asked of text itself on the first line (as text decides once).
	once    sync.Once
	colored bool
}

// New returns a Formatter that writes what
// &logrus.TextFormatter{FullTimestamp: true} writes.
func New() *Formatter {
	return &Formatter{text: &logrus.TextFormatter{FullTimestamp: true}}
}

// maxFields is how many fields a line may have for Format to sort their
// keys on the stack.
const maxFields = 16

// errIndex is the index of logrus.Entry's unexported err, which holds
// what logrus says about fields it dropped (TextFormatter writes it as
// logrus_error); -1 if a version of logrus has none, and then every line
// goes to TextFormatter.
var errIndex = func() int {
	f, ok := reflect.TypeFor[logrus.Entry]().FieldByName("err")
	if !ok || f.Type.Kind() != reflect.String || len(f.Index) != 1 {
		return -1
	}
	return f.Index[0]
}()

// Format implements logrus.Formatter.
func (f *Formatter) Format(e *logrus.Entry) ([]byte, error) {
	if !f.writes(e) {
		return f.text.Format(e)
	}
	b := e.Buffer
	if b == nil {
		b = new(bytes.Buffer)
	}
	start := b.Len()
	var fields [maxFields]field
	n := 0
	for k, v := range e.Data {
		switch k {
		case logrus.FieldKeyTime, logrus.FieldKeyLevel, logrus.FieldKeyMsg, logrus.FieldKeyLogrusError:
			// TextFormatter renames it (fields.msg): its line.
			return f.text.Format(e)
		}
		fields[n] = field{k, v}
		n++
	}
	sorted := fields[:n]
	for i := 1; i < n; i++ { // sorted by key, as slices.Sort sorts TextFormatter's keys
		for j := i; j > 0 && sorted[j].k < sorted[j-1].k; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}

	var tb [64]byte
	f.key(b, "time")
	appendString(b, e.Time.AppendFormat(tb[:0], time.RFC3339))
	f.key(b, "level")
	appendStringOf(b, e.Level.String())
	if e.Message != "" {
		f.key(b, "msg")
		appendStringOf(b, e.Message)
	}
	for _, kv := range sorted {
		f.key(b, kv.k)
		if !appendValue(b, kv.v) {
			// A String or Error method panicked: TextFormatter
			// writes the line, and what it says of the panic.
			b.Truncate(start)
			return f.text.Format(e)
		}
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// writes reports whether Format writes e itself.
func (f *Formatter) writes(e *logrus.Entry) bool {
	if e.Logger == nil || e.Caller != nil || len(e.Data) > maxFields || errIndex < 0 {
		return false
	}
	f.once.Do(func() {
		// TextFormatter decides once, from the logger's output, whether
		// it colours lines; a line it writes says which it decided.
		probe, err := f.text.Format(&logrus.Entry{Logger: e.Logger, Level: logrus.InfoLevel, Message: "probe"})
		f.colored = err != nil || !bytes.HasPrefix(probe, []byte("time="))
	})
	if f.colored {
		return false
	}
	// A field named like one of the line's own is seen by Format.
	return reflect.ValueOf(e).Elem().Field(errIndex).String() == ""
}

// field is one of a line's fields.
type field struct {
	k string
	v any
}

// key writes a field's key and its '=', after a space unless it is the
// first thing in the buffer, as TextFormatter does.
func (f *Formatter) key(b *bytes.Buffer, k string) {
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	b.WriteString(k)
	b.WriteByte('=')
}

// appendValue writes v as TextFormatter does. It returns false, having
// written part of it, if v's String or Error method panicked.
func appendValue(b *bytes.Buffer, v any) (ok bool) {
	switch v := v.(type) {
	case string:
		appendStringOf(b, v)
		return true
	case []byte:
		appendString(b, v)
		return true
	case bool:
		b.WriteString(strconv.FormatBool(v))
		return true
	case error:
		defer func() {
			if recover() != nil {
				ok = false
			}
		}()
		appendStringOf(b, v.Error())
		return true
	case fmt.Stringer:
		defer func() {
			if recover() != nil {
				ok = false
			}
		}()
		appendStringOf(b, v.String())
		return true
	}
	var raw [64]byte
	var num []byte
	switch v := v.(type) {
	case int:
		num = strconv.AppendInt(raw[:0], int64(v), 10)
	case int8:
		num = strconv.AppendInt(raw[:0], int64(v), 10)
	case int16:
		num = strconv.AppendInt(raw[:0], int64(v), 10)
	case int32:
		num = strconv.AppendInt(raw[:0], int64(v), 10)
	case int64:
		num = strconv.AppendInt(raw[:0], v, 10)
	case uint:
		num = strconv.AppendUint(raw[:0], uint64(v), 10)
	case uint8:
		num = strconv.AppendUint(raw[:0], uint64(v), 10)
	case uint16:
		num = strconv.AppendUint(raw[:0], uint64(v), 10)
	case uint32:
		num = strconv.AppendUint(raw[:0], uint64(v), 10)
	case uint64:
		num = strconv.AppendUint(raw[:0], v, 10)
	case uintptr:
		num = strconv.AppendUint(raw[:0], uint64(v), 10)
	case float32:
		num = strconv.AppendFloat(raw[:0], float64(v), 'g', -1, 32)
	case float64:
		num = strconv.AppendFloat(raw[:0], v, 'g', -1, 64)
	default:
		appendStringOf(b, fmt.Sprint(v))
		return true
	}
	b.Write(num)
	return true
}

// safe marks the bytes TextFormatter writes a value of without quotes
// when all its bytes are such; plain marks those strconv quotes as they
// are (printable ASCII but the quote and backslash).
var safe, plain = func() (safe, plain [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		safe[c], safe[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		safe[c] = true
	}
	for _, c := range []byte("-._/@^+") {
		safe[c] = true
	}
	for c := 0x20; c < 0x7F; c++ {
		plain[c] = c != '"' && c != '\\'
	}
	return safe, plain
}()

// appendString writes s as TextFormatter writes a string value: as it
// is if all its bytes are safe, otherwise as strconv quotes it.
func appendString(b *bytes.Buffer, s []byte) {
	quote, simple := false, true
	for _, c := range s {
		quote = quote || !safe[c]
		simple = simple && plain[c]
	}
	switch {
	case !quote:
		b.Write(s)
	case simple:
		b.WriteByte('"')
		b.Write(s)
		b.WriteByte('"')
	default:
		var tmp [128]byte
		b.Write(strconv.AppendQuote(tmp[:0], string(s)))
	}
}

// appendStringOf is appendString of a string.
func appendStringOf(b *bytes.Buffer, s string) {
	quote, simple := false, true
	for i := range len(s) {
		c := s[i]
		quote = quote || !safe[c]
		simple = simple && plain[c]
	}
	switch {
	case !quote:
		b.WriteString(s)
	case simple:
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
	default:
		var tmp [128]byte
		b.Write(strconv.AppendQuote(tmp[:0], s))
	}
}

// With is base.WithFields(fields) that, when base is a logrus Entry or
// Logger, makes fields the entry's own rather than a copy of them: for
// fields made for the lines of the entry it returns, which nothing
// changes after. base's own fields are added where fields has none.
func With(base logrus.FieldLogger, fields logrus.Fields) logrus.FieldLogger {
	var e *logrus.Entry
	switch l := base.(type) {
	case *logrus.Entry:
		e = l
	case *logrus.Logger:
		e = &logrus.Entry{Logger: l}
	default:
		return base.WithFields(fields)
	}
	for k, v := range e.Data {
		if _, set := fields[k]; !set {
			fields[k] = v
		}
	}
	return &logrus.Entry{Logger: e.Logger, Data: fields, Time: e.Time, Context: e.Context}
}
