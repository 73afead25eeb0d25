//go:build !unix

package redistest

// holdPort holds nothing here: a stopped server's port is left free.
func holdPort(int) int { return -1 }

func releasePort(int) {}
