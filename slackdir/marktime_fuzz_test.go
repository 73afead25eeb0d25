package slackdir

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzMarkTime: a change mark is read from Redis, where the bot writes
// "<unix ms>-<token>". A mark as the bot writes it, whatever its token,
// gives its time back; whatever a mark holds, reading its time does not
// panic, and a mark with no "-" has no time (the zero time reads as "no
// recent change", as a mark did before marks carried their time).
func FuzzMarkTime(f *testing.F) {
	f.Add(int64(1795879141470), "0f3a9c", "x-y")
	f.Add(int64(0), "", "")
	f.Add(int64(1), "-", "-1795879141470-t")
	f.Add(int64(1<<50), "a-b-c", "9223372036854775807-t")
	f.Add(int64(42), "{}%", "1e3-t")
	f.Fuzz(func(t *testing.T, ms int64, token, junk string) {
		if ms >= 0 { // the bot writes the time now: never negative
			mark := strconv.FormatInt(ms, 10) + "-" + token
			if got := markTime(mark).UnixMilli(); got != ms {
				t.Fatalf("markTime(%q) = %d ms, want %d", mark, got, ms)
			}
		}
		got := markTime(junk)
		if !strings.Contains(junk, "-") && !got.IsZero() {
			t.Fatalf("markTime(%q) = %v, want the zero time: the mark has no time", junk, got)
		}
	})
}

// A mark as the bot writes it: an answer fetched less than changeSettles
// after its change may be Slack's answer from before the change, and is
// not settled; one fetched then is.
func TestMarkTimeOfAWrittenMark(t *testing.T) {
	at := time.UnixMilli(1795879141470)
	mark := strconv.FormatInt(at.UnixMilli(), 10) + "-0f3a9c"
	if got := markTime(mark); !got.Equal(at) {
		t.Fatalf("markTime(%q) = %v, want %v", mark, got, at)
	}
	for _, c := range []struct {
		after   time.Duration
		settled bool
	}{{0, false}, {changeSettles - time.Millisecond, false}, {changeSettles, true}} {
		g := cachedGroup{fetched: at.Add(c.after), mark: mark, marked: true}
		if got := g.settled(); got != c.settled {
			t.Errorf("an answer fetched %v after the change: settled %v, want %v", c.after, got, c.settled)
		}
	}
}
