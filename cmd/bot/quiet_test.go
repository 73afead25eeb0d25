package main

import (
	"io"
	"strings"
)

// quiet waits until the bot is quiet: every request it has answered is
// done with, which it reports as countersign_background_jobs 0 (a job is
// counted before its request is answered). A test that asserts that
// something did not happen waits for this first, instead of for time.
func (h *harness) quiet() {
	h.t.Helper()
	h.quietAt(h.addr)
}

// quietAt is quiet for the bot process listening on addr (a replica's).
// Once the process that took a request in is quiet, the request is
// recorded as started: a process killed or stopped after that leaves
// nothing for another to start again.
func (h *harness) quietAt(addr string) {
	h.t.Helper()
	h.eventually(func() bool {
		resp, err := botClient.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			if line == "countersign_background_jobs 0" {
				return true
			}
		}
		return false
	}, "the bot at %s to be quiet (countersign_background_jobs 0)", addr)
}
