package redisstore

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// scriptFiles holds the store's Lua scripts, one file each under scripts/: each file's header
// names what it does, its KEYS and ARGV (with units) and its reply. Six files are snippets that
// scripts are prefixed with, written once: now.lua (Redis's clock as `now`, unix ms), lapse.lua
// (when a driver is offline, unknown or alive), ping_budget.lua (a driver's ping budget),
// available.lua (who may be offered a ride and who belongs in the GEO set of available drivers),
// gps_jump.lua (the GPS-jump rule of pings and hail presses) and hail_prelude.lua (the street-hail
// helpers).
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// loadScript returns the script made of the files names of scripts/, joined in order: the snippets
// a script needs first, the script last. A missing file is a build defect: it panics.
func loadScript(names ...string) *redis.Script {
	var b strings.Builder
	for _, n := range names {
		src, err := scriptFiles.ReadFile("scripts/" + n)
		if err != nil {
			panic("redisstore: " + err.Error())
		}
		b.Write(src)
		if len(src) > 0 && src[len(src)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return redis.NewScript(b.String())
}

// Snippets prefixed to the scripts that use them (see scriptFiles).
const (
	nowLua         = "now.lua"
	availableLua   = "available.lua"
	hailPreludeLua = "hail_prelude.lua"
	gpsJumpLua     = "gps_jump.lua"
	lapseLua       = "lapse.lua"
	pingBudgetLua  = "ping_budget.lua"
)
