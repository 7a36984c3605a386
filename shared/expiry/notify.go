package expiry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// allClass is what the "A" flag of notify-keyspace-events stands for (Redis 7: generic, string,
// list, set, hash, zset, expired, evicted, stream, module; not n or m).
const allClass = "g$lshzxetd"

// canonicalOrder is the order Redis itself prints the flags in (CONFIG GET).
const canonicalOrder = "g$lshzxetdnKEm"

// ErrNotificationsNotConfigured is wrapped by the start-up error when the server refuses CONFIG
// GET/SET and keyspace notifications could therefore not be checked or enabled.
var ErrNotificationsNotConfigured = errors.New("expiry: notify-keyspace-events must include Ex (e.g. \"Ex\" or \"KEA\"): " +
	"set it in the provider's parameter group or in redis.conf (notify-keyspace-events Ex), " +
	"then start the expiry source with --notifications-configured (Options.NotificationsConfigured)")

// parseFlags expands a notify-keyspace-events value into its set of single flags ("A" expanded).
func parseFlags(v string) map[rune]bool {
	set := map[rune]bool{}
	for _, r := range v {
		if r == 'A' {
			for _, a := range allClass {
				set[a] = true
			}
			continue
		}
		set[r] = true
	}
	return set
}

// hasExpiredEvents reports whether flags v publish expired events on the keyevent channels.
func hasExpiredEvents(v string) bool {
	f := parseFlags(v)
	return f['E'] && f['x']
}

// canonicalFlags writes a flag set in Redis's canonical form: "A" when every class flag is on,
// otherwise the class letters in Redis's order, then K, E and m. Unknown letters are dropped.
func canonicalFlags(set map[rune]bool) string {
	var b strings.Builder
	all := true
	for _, a := range allClass {
		all = all && set[a]
	}
	for _, r := range canonicalOrder {
		if !set[r] {
			continue
		}
		if all && strings.ContainsRune(allClass, r) {
			if r == 'g' {
				b.WriteByte('A')
			}
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// withExpiredEvents returns the canonical union of flags v and "Ex".
func withExpiredEvents(v string) string {
	f := parseFlags(v)
	f['E'], f['x'] = true, true
	return canonicalFlags(f)
}

// ensureNode makes sure one Redis server publishes keyevent expired notifications: CONFIG GET
// notify-keyspace-events and, when E or x is missing, CONFIG SET the union of the flags already set
// and Ex. It returns the value in force afterwards. A refusal (CONFIG unknown, renamed, or NOPERM)
// gives an error wrapping ErrNotificationsNotConfigured.
func ensureNode(ctx context.Context, c redis.Cmdable, addr string) (string, error) {
	m, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return "", refused(addr, "CONFIG GET", err)
	}
	cur := m["notify-keyspace-events"]
	if hasExpiredEvents(cur) {
		return cur, nil
	}
	want := withExpiredEvents(cur)
	if err := c.ConfigSet(ctx, "notify-keyspace-events", want).Err(); err != nil {
		return "", refused(addr, "CONFIG SET", err)
	}
	return want, nil
}

func refused(addr, what string, err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return fmt.Errorf("%w (Redis %s refused %s: %v)", ErrNotificationsNotConfigured, addr, what, err)
	}
	return fmt.Errorf("expiry: %s notify-keyspace-events on %s: %w", what, addr, err)
}

// onNewGeneration runs after the health mark saw a new Redis generation: a Redis restarted
// without its data has lost notify-keyspace-events too (unless its config file sets it), so the
// source re-applies it when flagdown owns it (Options.NotificationsConfigured false), and otherwise
// checks with CONFIG GET (where CONFIG is allowed) and logs an error when the deployment's promise
// does not hold. The sweep carries every timeout meanwhile.
func (s *Source) onNewGeneration(ctx context.Context) {
	if !s.opt.NotificationsConfigured {
		if err := EnsureNotifications(ctx, s.rdb, s.log); err != nil {
			s.errs.Add(1)
			s.log.Error("expiry: re-apply notify-keyspace-events after a new Redis generation", "err", err)
		}
		return
	}
	c, ok := s.rdb.(*redis.Client)
	if !ok {
		return
	}
	v, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return // CONFIG disabled (managed Redis): nothing to check with
	}
	if !hasExpiredEvents(v["notify-keyspace-events"]) {
		s.errs.Add(1)
		s.notConfigured.Add(1)
		s.log.Error("expiry: notify-keyspace-events lacks Ex although NotificationsConfigured says it is set; only the sweep carries timeouts",
			"redis", c.Options().Addr, "notify-keyspace-events", v["notify-keyspace-events"])
	}
}

// runIDEvery is how often, at most, the source reads Redis's run_id (checkRestart).
const runIDEvery = time.Second

// checkRestart reads the run_id of a single Redis server (INFO server) at most every runIDEvery. A
// run_id other than the last one seen means the server restarted at the same address: with its
// data (SHUTDOWN SAVE, an RDB or AOF load: the health mark survived, so no new generation is seen)
// or without. Either way its configuration came from its command line and file again and
// notify-keyspace-events may be gone, so onNewGeneration's rule applies (re-apply it when flagdown
// owns it, else check it). A Cluster's masters are re-configured by the cluster watch instead.
func (s *Source) checkRestart(ctx context.Context) {
	c, ok := s.rdb.(*redis.Client)
	if !ok {
		return
	}
	s.restart.Lock()
	defer s.restart.Unlock()
	if time.Since(s.restart.at) < runIDEvery {
		return
	}
	s.restart.at = time.Now()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return // unreachable, or INFO disabled: the next sweep tries again
	}
	var id string
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			id = v
		}
	}
	if id == "" {
		return
	}
	prev := s.restart.runID
	s.restart.runID = id
	if prev != "" && prev != id {
		s.log.Warn("expiry: Redis restarted at the same address (new run_id): checking notify-keyspace-events",
			"redis", c.Options().Addr)
		s.onNewGeneration(ctx)
	}
}
