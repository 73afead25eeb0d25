//go:build unix

package redistest

import (
	"errors"
	"syscall"
)

// holdPort binds a socket to 127.0.0.1:port without listening on it,
// while the server is down: a connection to the port is still refused,
// as it is to a stopped Redis, and no other test's server, given a free
// port by the system, can take it meanwhile and be there when this one
// restarts. Without SO_REUSEADDR, so that no listener binds beside it.
// It returns -1 if the port cannot be held (connections of the server
// that ended may keep it a while): the port is left as it was.
func holdPort(port int) int {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return -1
	}
	syscall.CloseOnExec(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return -1
	}
	return fd
}

// releasePort closes what holdPort held.
func releasePort(fd int) {
	if fd >= 0 {
		syscall.Close(fd)
	}
}

// refusingPort holds a free loopback port as holdPort holds a given one,
// and returns the port and the socket.
func refusingPort() (port, fd int, err error) {
	if fd = holdPort(0); fd < 0 {
		return 0, -1, errors.New("no socket bound to a free loopback port")
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return 0, -1, err
	}
	return sa.(*syscall.SockaddrInet4).Port, fd, nil
}
