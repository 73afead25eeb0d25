//go:build unix

package bot

import (
	"errors"
	"os"
	"syscall"
)

// canLock is whether the platform can lock the state directory, which
// the local redis-server needs.
const canLock = true

// tryLock takes an exclusive lock on f without waiting; false when
// another process holds it.
func tryLock(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
