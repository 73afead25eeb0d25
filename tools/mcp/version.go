package mcp

import (
	"runtime/debug"
	"sync/atomic"
)

// The client tells servers its name, countersign, and the bot's version:
// the one the binary reports (SetClientVersion), else the module's
// version or VCS revision from the build info, else "devel".

var clientVersion atomic.Pointer[string]

// SetClientVersion sets the version the client reports to servers.
func SetClientVersion(v string) {
	if v != "" {
		clientVersion.Store(&v)
	}
}

// ClientVersion is the version the client reports to servers.
func ClientVersion() string {
	if v := clientVersion.Load(); v != nil {
		return *v
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			return "devel-" + s.Value[:min(12, len(s.Value))]
		}
	}
	return "devel"
}
