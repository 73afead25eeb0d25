//go:build !unix

package bot

import (
	"errors"
	"os"
	"syscall"
)

// canLock is false: without a lock on the state directory the bot keeps
// its threads in memory when REDIS_URL is unset.
const canLock = false

func tryLock(*os.File) (bool, error) { return false, errors.ErrUnsupported }

func childProcAttr() *syscall.SysProcAttr { return nil }
