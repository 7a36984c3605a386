package expiry

import "sort"

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

// firedKey names the tombstone set of deadlines already published for the deadlines set key dk. It
// shares dk's hash slot (dk's own hash tag, or {dk}), so one script can move an entry between them
// in Redis Cluster too.
func firedKey(dk string) string {
	if i := indexByte(dk, '{'); i >= 0 {
		if j := indexByte(dk[i+1:], '}'); j > 0 {
			return dk + ":fired"
		}
	}
	return "{" + dk + "}:fired"
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
