package mcp

import "syscall"

// NonDumpable makes this process non-dumpable (prctl PR_SET_DUMPABLE 0),
// as ssh-agent does: its /proc entries (environ, mem, fd, maps) then
// belong to root, and a process of the same user, such as a tool server
// it started, can no longer read its environment or memory. It also
// turns off core dumps. Calling it again does nothing more.
func NonDumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return errno
	}
	return nil
}
