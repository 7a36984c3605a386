package redisstore

import (
	"context"
	"embed"
	"errors"
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

// ExecScripts sends pipe, whose scripts are queued with EvalSha (never Eval: EVAL makes Redis
// hash the script's source again at every call, which cost more than the script itself), and
// runs again each command Redis refused with NOSCRIPT (it restarted, failed over or flushed its
// script cache): it loads that command's script, one of scripts, on every node (Script.Load) and
// sends the refused commands once more. Redis refuses a NOSCRIPT command before running it, so
// every command of pipe runs once, however many were refused; the others keep their answers. It
// returns pipe's commands with their final answers and the first error among them, as Exec
// does (redis.Nil included).
func ExecScripts(ctx context.Context, rdb redis.Cmdable, pipe redis.Pipeliner, scripts ...*redis.Script) ([]redis.Cmder, error) {
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return cmds, nil
	}
	var refused []*redis.Cmd
	for _, c := range cmds {
		if e := c.Err(); e != nil && strings.HasPrefix(e.Error(), "NOSCRIPT") {
			if rc, ok := c.(*redis.Cmd); ok {
				refused = append(refused, rc)
			}
		}
	}
	if len(refused) == 0 {
		return cmds, err
	}
	loaded := map[string]bool{}
	retry := rdb.Pipeline()
	again := make([]*redis.Cmd, len(refused))
	for i, c := range refused {
		args := c.Args()
		sha, _ := args[1].(string)
		if !loaded[sha] {
			var src *redis.Script
			for _, s := range scripts {
				if s.Hash() == sha {
					src = s
				}
			}
			if src == nil {
				return cmds, err // not one of ours: leave its NOSCRIPT to the caller
			}
			if lerr := src.Load(ctx, rdb).Err(); lerr != nil {
				return cmds, lerr
			}
			loaded[sha] = true
		}
		again[i] = retry.Do(ctx, args...)
	}
	_, _ = retry.Exec(ctx)
	for i, c := range refused {
		c.SetVal(again[i].Val())
		c.SetErr(again[i].Err())
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil {
			return cmds, e
		}
	}
	return cmds, nil
}

// Piggyback is work another package adds to one of this store's pipelined reads (ReadSurge,
// Quote) to save its own round trip: Queue adds its commands to the read's pipeline, and Scripts
// are the scripts those commands run with EvalSha (ExecScripts loads them on NOSCRIPT). The
// caller reads its answers from the commands it queued once the read returned; a read that could
// not reach Redis leaves them holding that error. A Piggyback with a nil Queue adds nothing.
type Piggyback struct {
	Queue   func(ctx context.Context, pipe redis.Pipeliner)
	Scripts []*redis.Script
}

// queuePiggybacks adds each piggyback's commands to pipe, before the read's own, and returns
// scripts followed by theirs and how many commands they queued.
func queuePiggybacks(ctx context.Context, pipe redis.Pipeliner, scripts []*redis.Script, also []Piggyback) ([]*redis.Script, int) {
	for _, p := range also {
		if p.Queue == nil {
			continue
		}
		p.Queue(ctx, pipe)
		scripts = append(scripts, p.Scripts...)
	}
	return scripts, pipe.Len()
}

// ownErr is the first error, redis.Nil aside, among the answers of a read's own commands, those
// after the skip commands its piggybacks queued (a piggyback's failure is its owner's to judge);
// execErr, ExecScripts' error, when it returned no answers at all.
func ownErr(cmds []redis.Cmder, skip int, execErr error) error {
	if len(cmds) == 0 && execErr != nil && !errors.Is(execErr, redis.Nil) {
		return execErr
	}
	for _, c := range cmds[min(skip, len(cmds)):] {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}
