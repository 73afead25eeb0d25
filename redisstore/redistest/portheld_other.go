//go:build !unix

package redistest

import "net"

// holdPort holds nothing here: a stopped server's port is left free.
func holdPort(int) int { return -1 }

func releasePort(int) {}

// refusingPort returns a port that was free a moment ago: another test's
// server may be given it meanwhile.
func refusingPort() (port, fd int, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, -1, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, -1, nil
}
