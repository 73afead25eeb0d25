//go:build !unix

package mcp

import (
	"errors"
	"os/exec"

	"github.com/countersign/countersign/tools"
)

// serverAccount is the bot's own on systems without Unix users.
func serverAccount(cfg tools.MCPServer) (*account, error) {
	if cfg.User != "" {
		return nil, errors.New("user: is supported on Unix systems only")
	}
	return nil, nil
}

func runAs(*exec.Cmd, *account) {}

// workParent is empty: a server runs in the bot's working directory.
func workParent(*account) (string, error) { return "", nil }
