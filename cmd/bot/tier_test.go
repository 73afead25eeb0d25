package main

import "testing"

// needs skips a test under -short (`make test-fast`) that needs what
// that tier runs without: a redis-server process, Chromium or Node.
// `make test` runs it.
func needs(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s; `make test` runs it (go test without -short)", what)
	}
}
