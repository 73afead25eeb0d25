package logtext_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/countersign/countersign/internal/logtext"
)

// lines logs the same entry through a logger formatted by logtext and
// one formatted by logrus's TextFormatter, and returns both lines.
func lines(t *testing.T, level logrus.Level, msg string, fields logrus.Fields, at time.Time) (got, want string) {
	t.Helper()
	write := func(f logrus.Formatter) string {
		var out bytes.Buffer
		log := logrus.New()
		log.Out, log.Formatter, log.Level = &out, f, logrus.TraceLevel
		log.WithFields(fields).WithTime(at).Log(level, msg)
		return out.String()
	}
	return write(logtext.New()), write(&logrus.TextFormatter{FullTimestamp: true})
}

type stringer struct{ s string }

func (s *stringer) String() string { return s.s } // panics on a nil *stringer

type failure struct{}

func (*failure) Error() string { return "failure's text" } // does not look at its receiver

type named int

// The lines of an approved request, and lines with every kind of value
// TextFormatter writes, are written as TextFormatter writes them.
func TestLinesAreTextFormatters(t *testing.T) {
	at := time.Date(2026, 11, 27, 13, 45, 0, 123456789, time.UTC)
	var nilStringer *stringer
	var nilFailure *failure
	for _, tt := range []struct {
		msg    string
		fields logrus.Fields
	}{
		{"run paused for approval", logrus.Fields{"checkpoint": "afb7d1fce6009307", "how": "start", "requester": "U0ALICE",
			"run": "d599e1ac78ed", "thread": "T0TEAM:C0CHANNEL:1700000000.000100", "waiting": 1}},
		{"decision claimed", logrus.Fields{"by": "U0BOB", "call": "0.0", "decision": "approve", "thread": "t0"}},
		{"tool call done", logrus.Fields{"call": "0.0", "duration": 6633 * time.Nanosecond, "thread": "t0", "tool": "http_request"}},
		{"", nil},
		{"a \"quoted\" msg\n\ttab é \x00 \xff", logrus.Fields{"": "", "empty": "", "b": []byte("x y"), "raw": []byte("plain"),
			"t": true, "f": false, "i8": int8(-8), "i16": int16(16), "i32": int32(-32), "i64": int64(64), "u": uint(1),
			"u8": uint8(8), "u16": uint16(16), "u32": uint32(32), "u64": uint64(64), "up": uintptr(7)}},
		{"floats", logrus.Fields{"f32": float32(1.5), "f64": 1e21, "nan": float64(0) / 1, "named": named(3), "nil": nil,
			"err": errors.New("dial tcp: refused"), "list": []string{"a", "b"}, "map": map[string]int{"a": 1}}},
		{"panics", logrus.Fields{"s": nilStringer, "ok": "yes"}},
		{"nil error", logrus.Fields{"e": nilFailure, "s": &stringer{"fine"}}},
		{"clash", logrus.Fields{"msg": "a field named msg", "time": 1, "level": "x", "logrus_error": "y"}},
		{"dropped", logrus.Fields{"fn": func() {}, "ok": 1}},
		{"long " + strings.Repeat("ü", 200), logrus.Fields{"v": strings.Repeat("x y", 100)}},
	} {
		for _, level := range []logrus.Level{logrus.InfoLevel, logrus.WarnLevel, logrus.ErrorLevel, logrus.DebugLevel, logrus.TraceLevel} {
			got, want := lines(t, level, tt.msg, tt.fields, at)
			if got != want {
				t.Errorf("line:\n%q\nTextFormatter:\n%q", got, want)
			}
		}
	}
	many := logrus.Fields{}
	for i := range 40 {
		many[fmt.Sprint("k", i)] = i
	}
	if got, want := lines(t, logrus.InfoLevel, "many", many, at); got != want {
		t.Errorf("line:\n%q\nTextFormatter:\n%q", got, want)
	}
}

// A logger that writes to something other than a terminal gets no
// colour; the check is TextFormatter's own, made once.
func TestColourIsTextFormattersChoice(t *testing.T) {
	f := logtext.New()
	log := logrus.New()
	var out bytes.Buffer
	log.Out, log.Formatter = &out, f
	log.Info("hello")
	if strings.Contains(out.String(), "\x1b[") {
		t.Fatalf("coloured line to a buffer: %q", out.String())
	}
}

// A line is written by logtext itself, not handed to TextFormatter: it
// costs fewer allocations than TextFormatter's copy of the fields, its
// lists of keys and its time string.
func TestLineIsWrittenWithoutTextFormattersAllocations(t *testing.T) {
	allocs := func(f logrus.Formatter) float64 {
		log := logrus.New()
		log.Out, log.Formatter = io.Discard, f
		e := log.WithFields(logrus.Fields{"call": "0.0", "duration": 6633 * time.Nanosecond, "thread": "T0TEAM:C0CHANNEL:1700000000.000100"})
		return testing.AllocsPerRun(200, func() { e.Info("tool call done") })
	}
	got, text := allocs(logtext.New()), allocs(&logrus.TextFormatter{FullTimestamp: true})
	if got > text-4 {
		t.Errorf("a line costs %.0f allocations, TextFormatter's %.0f; want at least 4 fewer", got, text)
	}
}

// FuzzLines: whatever the message, keys and values (strings, numbers,
// durations, errors), a line is written as TextFormatter writes it.
func FuzzLines(f *testing.F) {
	f.Add("run finished", "thread", "T0TEAM:C0CHANNEL:1700000000.000100", int64(3), "how", "resume", int64(1764150837503626813))
	f.Add("", "", "", int64(0), "msg", "x", int64(0))
	f.Add("é\u2028\x7f", "k\"", "\\", int64(-1), "level", "\xff", int64(-62135596800))
	f.Add(strings.Repeat("a b", 60), "a=b", " ", int64(1<<62), "z", "\t", int64(253402300799))
	f.Fuzz(func(t *testing.T, msg, k1, v1 string, n int64, k2, v2 string, sec int64) {
		at := time.Unix(sec%(1<<40), n%1e9).UTC()
		fields := logrus.Fields{k1: v1, k2: time.Duration(n), k2 + "n": n, k1 + "e": errors.New(v2), k2 + "b": []byte(v2)}
		got, want := lines(t, logrus.InfoLevel, msg, fields, at)
		if got != want {
			t.Fatalf("line:\n%q\nTextFormatter:\n%q", got, want)
		}
	})
}

// An approved request's four lines cost a few allocations each, not
// TextFormatter's.
func BenchmarkLine(b *testing.B) {
	for _, tt := range []struct {
		name string
		f    logrus.Formatter
	}{{"logtext", logtext.New()}, {"TextFormatter", &logrus.TextFormatter{FullTimestamp: true}}} {
		b.Run(tt.name, func(b *testing.B) {
			log := logrus.New()
			log.Out, log.Formatter = io.Discard, tt.f
			e := log.WithFields(logrus.Fields{"checkpoint": "afb7d1fce6009307", "how": "start", "requester": "U0ALICE",
				"run": "d599e1ac78ed", "thread": "T0TEAM:C0CHANNEL:1700000000.000100", "waiting": 1})
			b.ReportAllocs()
			for b.Loop() {
				e.Info("run paused for approval")
			}
		})
	}
}

// With's lines carry the fields given and those of the entry it adds
// them to, the given ones first, as WithFields's do.
func TestWithAddsTheEntrysFields(t *testing.T) {
	var out bytes.Buffer
	log := logrus.New()
	log.Out, log.Formatter = &out, logtext.New()
	run := logtext.With(log, logrus.Fields{"run": "r1", "thread": "t1"})
	logtext.With(run, logrus.Fields{"checkpoint": "c1", "thread": "t2"}).Info("run finished")
	run.Info("run goes on")
	got := out.String()
	for _, want := range []string{"msg=\"run finished\" checkpoint=c1 run=r1 thread=t2\n", "msg=\"run goes on\" run=r1 thread=t1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("lines %q lack %q", got, want)
		}
	}
}
