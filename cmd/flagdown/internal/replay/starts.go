package replay

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// DriverStarts names where the replay's simulated drivers start (flag --driver-starts).
type DriverStarts string

const (
	// StartsDropoffsBefore (the default) places drivers at the dropoff points of the file's trips that
	// ended (Trip.DropoffAt) before the replayed window opens: where taxis really were then, with no
	// knowledge of the demand to come. When no trip ended before the window (always so for a window
	// that opens at the file's first pickup: --skip-minutes 0), it falls back to the dropoffs of the
	// file's trips picked up outside the window. A point equal to a replayed pickup is never used.
	StartsDropoffsBefore DriverStarts = "dropoffs-before"
	// StartsReplayPickups places drivers at the pickup points of the whole file, the replayed pickups
	// included (what the replay did before dropoffs-before). Optimistic: supply sits where demand will
	// appear, so pickup distances come out near 0 m and say little about dispatch.
	StartsReplayPickups DriverStarts = "replay-pickups"
)

// DriverStartsModes lists the valid DriverStarts values, the default first.
var DriverStartsModes = []DriverStarts{StartsDropoffsBefore, StartsReplayPickups}

// ParseDriverStarts returns the DriverStarts named s, or an error listing the valid names.
func ParseDriverStarts(s string) (DriverStarts, error) {
	for _, m := range DriverStartsModes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("driver-starts %q: want one of %v", s, DriverStartsModes)
}

// StartPool is the set of positions the drivers' starts are drawn from, and where they came from.
type StartPool struct {
	// Mode is the placement the pool was built for.
	Mode DriverStarts
	// Points are the candidate start positions (WGS84 degrees, lat/lng), one per trip used, in the
	// file's pickup order.
	Points []LatLng
	// TripsBefore is how many of Points are dropoffs of trips that ended before the window
	// (StartsDropoffsBefore).
	TripsBefore int
	// TripsFallback is how many of Points are dropoffs of trips picked up outside the window, used
	// only when TripsBefore is 0 (StartsDropoffsBefore).
	TripsFallback int
	// ExcludedAtPickup is how many dropoffs were left out because they equal a replayed pickup.
	ExcludedAtPickup int
}

// BuildStartPool builds the start positions for mode from all, the file's trips sorted by pickup
// time, for the replayed window [start, end) of pickup times. StartsReplayPickups uses every pickup of
// all. StartsDropoffsBefore uses the dropoffs of trips with DropoffAt before start or, when there are
// none, those of trips with a pickup outside [start, end); in both cases dropoffs equal to the pickup
// of a replayed trip are left out. It fails when no position is left.
func BuildStartPool(all []Trip, start, end time.Time, mode DriverStarts) (StartPool, error) {
	pool := StartPool{Mode: mode}
	inWindow := func(t Trip) bool { return !t.PickupTime.Before(start) && t.PickupTime.Before(end) }
	switch mode {
	case StartsReplayPickups:
		for _, t := range all {
			pool.Points = append(pool.Points, t.Pickup)
		}
	case StartsDropoffsBefore:
		replayed := map[LatLng]bool{}
		for _, t := range all {
			if inWindow(t) {
				replayed[t.Pickup] = true
			}
		}
		pick := func(keep func(Trip) bool) int {
			n := 0
			for _, t := range all {
				if !keep(t) {
					continue
				}
				if replayed[t.Dropoff] {
					pool.ExcludedAtPickup++
					continue
				}
				pool.Points = append(pool.Points, t.Dropoff)
				n++
			}
			return n
		}
		pool.TripsBefore = pick(func(t Trip) bool { return t.DropoffAt().Before(start) })
		if pool.TripsBefore == 0 {
			pool.TripsFallback = pick(func(t Trip) bool { return !inWindow(t) })
		}
	default:
		return pool, fmt.Errorf("driver-starts %q: want one of %v", mode, DriverStartsModes)
	}
	if len(pool.Points) == 0 {
		return pool, fmt.Errorf("driver-starts %s: no start position: every trip of the file is in the replayed window "+
			"(replay fewer minutes, or use --driver-starts=%s)", mode, StartsReplayPickups)
	}
	return pool, nil
}

// DrawDriverStarts draws n driver start positions (WGS84 degrees, lat/lng) uniformly with replacement
// from points, deterministically from seed: the same points, n and seed give the same positions.
func DrawDriverStarts(points []LatLng, n int, seed uint64) []LatLng {
	if len(points) == 0 || n <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed_d21e_0001))
	out := make([]LatLng, n)
	for i := range out {
		out[i] = points[rng.IntN(len(points))]
	}
	return out
}

// describe says in one line where the pool's positions come from, for the replay's output.
func (p StartPool) describe() string {
	switch {
	case p.Mode == StartsReplayPickups:
		return fmt.Sprintf("%s: pickups of %d trips of the file, the replayed ones included (optimistic)", p.Mode, len(p.Points))
	case p.TripsBefore > 0:
		return fmt.Sprintf("%s: dropoffs of %d trips that ended before the window", p.Mode, p.TripsBefore)
	default:
		return fmt.Sprintf("%s: no trip ended before the window; fell back to dropoffs of %d trips picked up outside it", p.Mode, p.TripsFallback)
	}
}
