//go:build !linux

package mcp

// NonDumpable does nothing on systems other than Linux, whose /proc it
// closes.
func NonDumpable() error { return nil }
