package bot

import "syscall"

// childProcAttr puts the local redis-server in a process group of its
// own (a Ctrl-C for the bot does not reach it; the bot stops it after
// its own shutdown) and has the kernel send it SIGTERM, on which it
// writes its file and exits, if the bot dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
