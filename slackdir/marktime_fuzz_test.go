package slackdir

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzMarkTime: a change mark is read from Redis, where the bot writes
// "<unix ms>-<token>". Whatever a mark holds, reading its time does not
// panic; a mark as the bot writes it gives its time back; one with no
// time gives the zero time, which reads as "no recent change", as a
// mark did before marks carried their time; and a mark whose time is
// the future (or the zero time) never makes an answer fetched before it
// count as settled earlier than the time it says.
func FuzzMarkTime(f *testing.F) {
	for _, seed := range []string{
		"1795879141470-0f3a9c", "", "-", "x-y", "1795879141470", "-1795879141470-t", "9223372036854775807-t",
		"-9223372036854775808-t", "00001-", "1e3-t", " 12-t", "+12-t", "12--t",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, mark string) {
		got := markTime(mark)
		ms, _, ok := strings.Cut(mark, "-")
		if !ok {
			if !got.IsZero() {
				t.Fatalf("markTime(%q) = %v, want the zero time: the mark has no time", mark, got)
			}
			return
		}
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			if !got.IsZero() {
				t.Fatalf("markTime(%q) = %v, want the zero time: %q is no time", mark, got, ms)
			}
			return
		}
		if want := time.UnixMilli(n); !got.Equal(want) {
			t.Fatalf("markTime(%q) = %v, want %v", mark, got, want)
		}
		// An answer fetched at the mark's time is not settled: it may be
		// Slack's answer before the change.
		c := cachedGroup{fetched: got, mark: mark, marked: true}
		if c.settled() {
			t.Fatalf("an answer fetched as the change %q was made counts as settled", mark)
		}
	})
}

// A mark as the bot writes it.
func TestMarkTimeOfAWrittenMark(t *testing.T) {
	at := time.UnixMilli(1795879141470)
	mark := strconv.FormatInt(at.UnixMilli(), 10) + "-0f3a9c"
	if got := markTime(mark); !got.Equal(at) {
		t.Fatalf("markTime(%q) = %v, want %v", mark, got, at)
	}
	c := cachedGroup{fetched: at.Add(changeSettles), mark: mark, marked: true}
	if !c.settled() {
		t.Errorf("an answer fetched %v after the change does not count as settled", changeSettles)
	}
}
