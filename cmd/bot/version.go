package main

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/countersign/countersign/tools/mcp"
)

// version is stamped at build time (-ldflags "-X main.version=v1.2.3");
// without it the module version and VCS revision from the build info
// stand in.
var version = ""

// MCP servers are told the bot's version.
func init() {
	ver, _, _ := buildVersion()
	mcp.SetClientVersion(ver)
}

// buildVersion describes this build: its version, VCS revision and Go
// version.
func buildVersion() (ver, revision, goVersion string) {
	ver, revision = version, "unknown"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return orDefault(ver, "devel"), revision, "unknown"
	}
	if ver == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		ver = info.Main.Version
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
			if len(revision) > 12 {
				revision = revision[:12]
			}
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		revision += "-dirty"
	}
	return orDefault(ver, "devel"), revision, info.GoVersion
}

func runVersion(_ context.Context, args []string, e env) error {
	if err := parse(flags("version", "version", e), args, e); err != nil {
		return err
	}
	ver, rev, gov := buildVersion()
	fmt.Fprintf(e.stdout, "countersign %s (revision %s, %s)\n", ver, rev, gov)
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
