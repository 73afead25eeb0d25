package redistest

import "syscall"

// sysProcAttr makes the kernel kill a server when the test binary dies, so a
// test that times out or panics leaves no redis-server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
