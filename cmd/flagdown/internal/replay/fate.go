package replay

import (
	"math"
	"math/rand/v2"
	"time"
)

// fateStream separates the random stream of a driver's misbehaviour draws (no-answer, offline) from
// his original stream (think times, accept decisions), so adding these draws leaves those unchanged.
const fateStream = 0xfa7e << 32

// newFateRand returns driver i's seeded stream for the no-answer and offline draws.
func newFateRand(seed uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, fateStream|uint64(i)))
}

// maxOfflineAfter bounds OfflineAfter: a later drop is reported as never (it would overflow
// time.Duration and no replay runs that long).
const maxOfflineAfter = 10_000 * time.Hour

// OfflineAfter turns a uniform draw u in [0, 1) into the simulated shift time after which a driver
// drops offline for good, when the probability of dropping within any one simulated hour is perHour
// (0 ≤ perHour < 1): an exponential time with hazard −ln(1−perHour) per simulated hour, so that
// P(drop within h hours) = 1 − (1−perHour)^h. ok is false when the driver never drops (perHour 0, or
// beyond 10,000 simulated hours).
func OfflineAfter(u, perHour float64) (after time.Duration, ok bool) {
	if !(perHour > 0) || !(perHour < 1) || math.IsNaN(u) {
		return 0, false
	}
	u = min(max(u, 0), math.Nextafter(1, 0))
	hours := math.Log1p(-u) / math.Log1p(-perHour) // both logs ≤ 0
	if !(hours >= 0) || hours*float64(time.Hour) > float64(maxOfflineAfter) {
		return 0, false
	}
	return time.Duration(hours * float64(time.Hour)), true
}

// drawOffline draws from rng when a driver with the given per-simulated-hour drop probability drops
// offline, as simulated shift time (see OfflineAfter). It always consumes exactly one draw.
func drawOffline(rng *rand.Rand, perHour float64) (time.Duration, bool) {
	return OfflineAfter(rng.Float64(), perHour)
}

// drawNoAnswer draws from rng whether a driver ignores an offer (probability p). It always consumes
// exactly one draw, so the stream does not depend on p.
func drawNoAnswer(rng *rand.Rand, p float64) bool {
	return rng.Float64() < p
}
