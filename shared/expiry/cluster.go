package expiry

import (
	"sort"

	"github.com/flagdown/flagdown/shared/redisstore"
)

// diffMasters compares the master addresses being followed with the current ones and returns the
// addresses to subscribe to and those to drop, each sorted. It is the pure part of following a
// Redis Cluster's topology.
func diffMasters(running map[string]bool, current []string) (add, drop []string) {
	cur := make(map[string]bool, len(current))
	for _, a := range current {
		if cur[a] {
			continue
		}
		cur[a] = true
		if !running[a] {
			add = append(add, a)
		}
	}
	for a := range running {
		if !cur[a] {
			drop = append(drop, a)
		}
	}
	sort.Strings(add)
	sort.Strings(drop)
	return add, drop
}

// firedKey names the tombstone set of deadlines already published for the deadlines set key dk
// (see redisstore.FiredKeyFor, the one owner of the name).
func firedKey(dk string) string { return redisstore.FiredKeyFor(dk) }
