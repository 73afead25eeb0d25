package mcp

import (
	"slices"
	"strings"

	"github.com/countersign/countersign/tools"
)

// BaseEnv are the bot's environment variables that every stdio server is
// given, when they are set: where programs are, the locale and time zone,
// and who and where the user is. Any LC_* variable is given too. A server
// gets more of the bot's variables only by name (inherit_env), and never
// one of tools.BotSecretEnv.
var BaseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// account is the user a server runs as, when it is not the bot's own.
type account struct {
	name     string
	uid, gid uint32
	home     string // made for it, owned by it
}

// serverEnv is the environment of a stdio server: from environ (the
// bot's), the variables of BaseEnv, LC_* and cfg.InheritEnv; then, for
// a server run as another account, that account's HOME, USER and LOGNAME
// (and no TMPDIR of the bot's); then cfg.Env, which wins.
func serverEnv(cfg tools.MCPServer, environ []string, as *account) []string {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || tools.IsBotSecretEnv(k) {
			continue
		}
		if slices.Contains(BaseEnv, k) || strings.HasPrefix(k, "LC_") || slices.Contains(cfg.InheritEnv, k) {
			set(k, v)
		}
	}
	if as != nil {
		set("HOME", as.home)
		set("USER", as.name)
		set("LOGNAME", as.name)
		if !slices.Contains(cfg.InheritEnv, "TMPDIR") {
			delete(vars, "TMPDIR")
			order = slices.DeleteFunc(order, func(k string) bool { return k == "TMPDIR" })
		}
	}
	keys := make([]string, 0, len(cfg.Env))
	for k := range cfg.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		set(k, cfg.Env[k])
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out
}
