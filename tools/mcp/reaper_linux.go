package mcp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A stdio server's process tree ends with the bot, however the bot ends.
//
// A bot that stops closes a server's stdin, then signals it (stdio.go).
// A bot that is killed outright (kill -9, the OOM killer, a crash) can do
// neither, and a server that does not notice the end of its input would
// run on; so would what the server started: `npx` is `npm exec`, which
// starts `sh -c`, which starts `node`, and a SIGTERM to `npm exec` ends
// it and leaves `node` running. The kernel's parent-death signal
// (PR_SET_PDEATHSIG) reaches only a process's own child, so the bot does
// not start the server itself: it starts a reaper, its own binary run
// again under the name reaperArg0, which the kernel signals when the bot
// dies. The reaper starts the server in a process group of its own, is
// the subreaper of everything below it (a process whose parent dies is
// handed to it, not to init), and when it is signalled (the bot died, or
// the bot stops the server) or the server exits, it ends the server's
// group and every process below itself: SIGTERM, then SIGKILL after the
// grace the bot gives it. It exits once nothing is left, as the server
// did (its exit status, or its signal). It also gives the server a
// working directory of its own, which it removes once nothing is left
// (workdir_linux.go), and makes the server's processes the OOM killer's
// choice before the bot (serverOOMBias).
//
// The parent-death signal is sent when the *thread* that started the
// process exits, not the process (golang.org/issue/27505): the Go runtime
// ends a thread whose goroutine exits while locked to it. So reapers are
// started from a goroutine locked to its thread for the life of the
// process (spawner), whose thread never exits.

// reaperArg0 is the name the bot's binary runs under as a reaper; its
// init sees it and runs the reaper instead of the program.
const reaperArg0 = "countersign-mcp-reaper"

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER (linux/prctl.h), which
// package syscall does not name.
const prSetChildSubreaper = 36

// init runs the reaper when this binary was started as one, and does
// nothing otherwise. It is in init, not in main, so that every binary
// that can start a server (the bot, and each package's tests that make a
// Manager) can be its own reaper: a main that forgot to call a hook would
// be run again with the reaper's arguments.
func init() {
	if len(os.Args) > 1 && os.Args[0] == reaperArg0 {
		// Not os.Exit: nothing of the bot's is to be run or flushed,
		// and a binary built with -race would wait a second more.
		syscall.Exit(reap(os.Args[1:]))
	}
}

// reaperGrace is how long the reaper waits, after its SIGTERM to the
// server's processes, before SIGKILL.
func reaperGrace(terminate time.Duration) time.Duration { return terminate }

// startServer starts cmd, a stdio server's command, under a reaper (see
// above). The reaper runs as the bot's user, with the server's
// environment, and starts the server as cmd's Credential says, in a
// working directory it makes in workIn (workdir_linux.go), or when
// workIn is empty in cmd.Dir. cmd.Process is the reaper; signalling it
// signals the server.
func startServer(cmd *exec.Cmd, grace time.Duration, workIn string) error {
	if cmd.Err != nil {
		return cmd.Err
	}
	args := []string{reaperArg0, "-grace", grace.String()}
	if workIn != "" {
		args = append(args, "-workdir-in", workIn)
	}
	if attr := cmd.SysProcAttr; attr != nil && attr.Credential != nil {
		c := attr.Credential
		args = append(args, "-uid", strconv.FormatUint(uint64(c.Uid), 10), "-gid", strconv.FormatUint(uint64(c.Gid), 10))
	}
	args = append(args, "--", cmd.Path)
	cmd.Args = append(args, cmd.Args...)
	cmd.Path = "/proc/self/exe" // this binary, even if its file was replaced since
	// A process group of its own, which a Ctrl-C for the bot does not
	// reach (the bot stops its servers itself), and the kernel's
	// SIGTERM when the bot dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// The reaper says on its fd 3 why it could not start the server (a
	// program that is not there), as the bot would have been told.
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd.ExtraFiles = []*os.File{w}
	err = onSpawner(cmd.Start)
	_ = w.Close()
	if err != nil {
		return err
	}
	why, _ := io.ReadAll(io.LimitReader(r, 4096))
	if len(why) > 0 {
		_ = cmd.Wait()
		return errors.New(string(why))
	}
	return nil
}

var spawner = sync.OnceValue(func() chan func() {
	ch := make(chan func())
	go func() {
		// Never unlocked: this goroutine and its thread last as long
		// as the process, and so the parent-death signals of the
		// processes it starts come when the process dies.
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
})

// onSpawner runs start on the spawner's thread.
func onSpawner(start func() error) error {
	done := make(chan error, 1)
	spawner() <- func() { done <- start() }
	return <-done
}

// reap is the reaper: args are its options, "--", the server's program,
// and the server's argv. It returns the exit status to exit with, when it
// does not end with the server's signal.
func reap(args []string) int {
	runtime.LockOSThread() // the main thread, which starts the server, until the reaper exits
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, reaperArg0+": "+format+"\n", a...)
		return 127
	}
	preferForOOM() // while its /proc entries are its own to write
	// Its environment is the server's; still, the server has no business
	// with its /proc entries.
	_ = NonDumpable()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	// Caught and dropped, not ignored: an ignored signal would stay
	// ignored in the server.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	syscall.CloseOnExec(3) // not the server's
	startErr := os.NewFile(3, "start error")
	defer startErr.Close()
	o, err := reaperArgs(args)
	if err != nil {
		return fail("%v", err)
	}
	grace, cred, prog, argv := o.grace, o.cred, o.prog, o.argv
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fail("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}
	var work string
	if o.workIn != "" {
		if work, err = makeWorkdir(o.workIn, cred); err != nil {
			_, _ = startErr.WriteString("the server's working directory: " + err.Error())
			return 127
		}
		// Once nothing of the server's is left (allGone), or it did not start.
		defer os.RemoveAll(work)
	}
	proc, err := os.StartProcess(prog, argv, &os.ProcAttr{
		Dir: work,
		// The reaper's environment is the server's allow-list
		// (serverEnv), which the bot started it with: nothing more.
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		// The server's own group, which the reaper ends at once; and
		// SIGKILL if the reaper itself is killed outright.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred},
	})
	if err != nil {
		_, _ = startErr.WriteString(err.Error())
		return 127
	}
	_ = startErr.Close()
	// The server's stdin and stdout are the bot's pipes: their ends here
	// must not keep them open once the server is gone.
	_ = os.Stdin.Close()
	_ = os.Stdout.Close()

	server := proc.Pid
	exited := make(chan syscall.WaitStatus)
	allGone := make(chan struct{})
	go func() {
		// Every child: the server, and the processes handed over when
		// their parents died.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			switch {
			case errors.Is(err, syscall.EINTR):
			case err != nil: // ECHILD: nothing is left
				close(allGone)
				return
			case pid == server:
				exited <- ws
			}
		}
	}()
	var status syscall.WaitStatus
	var kill <-chan time.Time
	ending := false
	end := func() {
		if !ending {
			ending = true
			kill = time.After(grace)
		}
		signalTree(server, syscall.SIGTERM)
	}
	for {
		select {
		case <-stop:
			end()
		case status = <-exited:
			// What the server left behind ends with it.
			end()
		case <-kill:
			signalTree(server, syscall.SIGKILL)
			kill = time.After(100 * time.Millisecond) // again, for what was forked meanwhile
		case <-allGone:
			if work != "" {
				_ = os.RemoveAll(work)
			}
			if status.Signaled() {
				// End as the server did.
				signal.Reset()
				_ = syscall.Kill(os.Getpid(), status.Signal())
				return 128 + int(status.Signal())
			}
			return status.ExitStatus()
		}
	}
}

// serverOOMBias is added to the oom_score_adj of a server and of its
// reaper, and so of everything the server starts: when the machine runs
// out of memory, the kernel ends a server's processes (a browser a tool
// drives, say) before the bot. The reaper has it too (it cannot lower it
// again once it is not dumpable, as it must be for the server's sake),
// but the kernel's score adds a process's memory to it, and a reaper's is
// a few megabytes: it goes after what it would end.
const serverOOMBias = 500

// preferForOOM raises the process's oom_score_adj by serverOOMBias; where
// /proc cannot be written, it changes nothing.
func preferForOOM() {
	const path = "/proc/self/oom_score_adj"
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if old, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
		_ = os.WriteFile(path, []byte(strconv.Itoa(min(old+serverOOMBias, 1000))), 0)
	}
}

// reaperOptions are the reaper's arguments.
type reaperOptions struct {
	// grace is how long the server's processes have between SIGTERM
	// and SIGKILL.
	grace time.Duration
	// cred is the account the server runs as; nil: the reaper's.
	cred *syscall.Credential
	// workIn is where the server's working directory is made
	// (makeWorkdir); empty: it runs in the reaper's.
	workIn string
	// prog is the server's program, argv its argv.
	prog string
	argv []string
}

// reaperArgs reads the reaper's arguments.
func reaperArgs(args []string) (o reaperOptions, err error) {
	var uid, gid *uint32
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			return o, fmt.Errorf("option %s without its value", args[0])
		}
		switch opt, val := args[0], args[1]; opt {
		case "-grace":
			if o.grace, err = time.ParseDuration(val); err != nil {
				return o, err
			}
		case "-workdir-in":
			if !filepath.IsAbs(val) {
				return o, fmt.Errorf("-workdir-in %q: not an absolute path", val)
			}
			o.workIn = val
		case "-uid", "-gid":
			n, perr := strconv.ParseUint(val, 10, 32)
			if perr != nil {
				return o, fmt.Errorf("%s %q: %w", opt, val, perr)
			}
			id := uint32(n)
			if opt == "-uid" {
				uid = &id
			} else {
				gid = &id
			}
		default:
			return o, fmt.Errorf("unknown option %s", opt)
		}
		args = args[2:]
	}
	if len(args) < 3 {
		return o, errors.New("usage: " + reaperArg0 + " [-grace D] [-uid N -gid N] [-workdir-in DIR] -- PROGRAM ARGV0 [ARG...]")
	}
	if (uid == nil) != (gid == nil) {
		return o, errors.New("-uid and -gid go together")
	}
	if uid != nil {
		o.cred = &syscall.Credential{Uid: *uid, Gid: *gid, Groups: []uint32{}}
	}
	o.prog, o.argv = args[1], args[2:]
	return o, nil
}

// signalTree sends sig to the server's process group and to every
// process below the reaper (the server's descendants that left its
// group, which were handed to the reaper when their parents died, or
// are still below the server).
func signalTree(group int, sig syscall.Signal) {
	_ = syscall.Kill(-group, sig)
	for _, pid := range below(os.Getpid()) {
		_ = syscall.Kill(pid, sig)
	}
}

// below returns the processes under pid, read from /proc.
func below(pid int) []int {
	parent := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(fields[1]); err == nil {
			parent[pp] = append(parent[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range parent[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
