package metrics

import (
	"math"
	"strconv"
	"testing"
	"time"
)

// The bytes a command is counted for are those go-redis sends, whatever
// the kind of its arguments, the integers a save sends included.
func TestCommandSizeCountsWhatIsSent(t *testing.T) {
	args := []any{"evalsha", "0123456789abcdef", 5, int64(-12), []byte("{\"v\":2}"), 0, int64(math.MaxInt64),
		int64(math.MinInt64), math.MinInt, 3.5, true, nil, time.Second, uint8(7)}
	want := 1 + len("14") + 2
	for _, a := range args {
		s := argString(a)
		want += 1 + len(strconv.Itoa(len(s))) + 2 + len(s) + 2
	}
	if got := commandSize(args); got != want {
		t.Errorf("commandSize = %d, want %d", got, want)
	}
	for _, a := range args {
		if got, want := argLen(a), len(argString(a)); got != want {
			t.Errorf("argLen(%#v) = %d, want %d", a, got, want)
		}
	}
}
