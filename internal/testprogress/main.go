// Command testprogress reads `go test -json` on its standard input and
// prints what a person watching a long run needs: a line for each
// package when it finishes (its time, how many tests passed and were
// skipped), a line for each top-level test that took a while or failed,
// a line every half minute naming the tests still running, and the whole
// output of every failed test and every package that did not build. It
// exits 1 when anything failed. `make test` and `make test-fast` pipe
// go test through it:
//
//	go test -json ./... 2>&1 | go run ./internal/testprogress
//
// Lines that are not JSON (go test's own errors) are printed as they are.
// It owns no test logic; go test decides what passes.
package main

import (
	"fmt"
	"os"
	"time"
)

func main() {
	p := newProgress(os.Stdout, time.Now)
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				p.tick()
			}
		}
	}()
	failed, err := p.read(os.Stdin)
	close(stop)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		os.Exit(2)
	}
	p.summary()
	if failed {
		os.Exit(1)
	}
}
