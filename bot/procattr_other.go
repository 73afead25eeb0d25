//go:build unix && !linux

package bot

import "syscall"

// childProcAttr puts the local redis-server in a process group of its
// own; only Linux can tie a child's life to its parent's, so elsewhere
// a bot that is killed leaves it running until the next start uses it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
