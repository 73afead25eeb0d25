//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil: only Linux can tie a child's life to its parent's.
// Servers are still stopped by the tests' cleanup.
func sysProcAttr() *syscall.SysProcAttr { return nil }
