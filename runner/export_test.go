package runner

import "time"

// SetRecordAfter makes shown deliveries wait d for the thread's next step
// before they are written on their own, until the returned func is
// called.
func SetRecordAfter(d time.Duration) func() {
	old := recordAfter.Swap(int64(d))
	return func() { recordAfter.Store(old) }
}

// TSAfter is tsAfter, for the tests of its order.
var TSAfter = tsAfter
