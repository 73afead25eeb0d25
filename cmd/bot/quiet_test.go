package main

import (
	"io"
	"strings"
)

// quiet waits until the bot is quiet: every request it has answered is
// done with, which it reports as countersign_background_jobs 0 (a job is
// counted before its request is answered). A test that asserts that
// something did not happen waits for this first, instead of for time.
// Once the bot is quiet, a request it took in is recorded as started: a
// bot killed or stopped after that leaves nothing for another process
// to start again.
func (h *harness) quiet() {
	h.t.Helper()
	h.eventually(func() bool {
		resp, err := botClient.Get("http://" + h.addr + "/metrics")
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
	}, "the bot to be quiet (countersign_background_jobs 0)")
}
