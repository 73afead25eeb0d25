package mcp

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The kernel sends a reaper its parent-death signal when the thread that
// started it ends, not the bot: a goroutine that starts a server from a
// thread that then ends (a goroutine locked to it that returns) must not
// have it signalled. Reapers are started on the spawner's thread, which
// outlives the thread of any caller.
func TestReapersStartOnAThreadThatLasts(t *testing.T) {
	type tids struct{ caller, starter int }
	var ids tids
	for {
		got := make(chan tids, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			var ids tids
			ids.caller = syscall.Gettid()
			_ = onSpawner(func() error {
				ids.starter = syscall.Gettid()
				return nil
			})
			got <- ids
		}()
		// The runtime never ends the main thread: when the goroutine
		// ran there, another is tried.
		if ids = <-got; ids.caller != os.Getpid() {
			break
		}
	}
	if ids.starter == ids.caller {
		t.Fatalf("a reaper would be started on the caller's thread %d", ids.caller)
	}
	task := func(tid int) string { return "/proc/self/task/" + strconv.Itoa(tid) }
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(task(ids.caller)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the caller's thread %d did not end within 20 s", ids.caller)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc for the thread to end
	}
	if _, err := os.Stat(task(ids.starter)); err != nil {
		t.Errorf("the thread that starts reapers ended with its caller's: %v", err)
	}
}
