package dispatch

import (
	"math"
	"sort"
)

// ScoreParams weigh the candidate score (config FLAGDOWN_SCORE_* and FLAGDOWN_DEFAULT_RATING).
type ScoreParams struct {
	// IdleBonusMPerMin: metres forgiven per minute idle.
	IdleBonusMPerMin float64
	// IdleCapMin caps the idle minutes counted.
	IdleCapMin float64
	// RatingBonusM: metres forgiven per star above DefaultRating (and added per star below it).
	RatingBonusM float64
	// DefaultRating is the rating assumed when a driver has none, stars 1..5.
	DefaultRating float64
}

// Candidate is an available driver near a pickup.
type Candidate struct {
	DriverID string
	// DistanceM is the straight-line distance to the pickup in metres (from GEOSEARCH WITHDIST).
	DistanceM float64
	// Position is the driver's last accepted position.
	Position Point
	// Rating is the driver's rating in stars (1..5); 0 means unknown (DefaultRating is used).
	Rating float64
	// IdleS is how long the driver has been available, seconds.
	IdleS float64
	// Score is the cost computed by Rank: lower is better, in metres-equivalent.
	Score float64
}

// Score is a candidate's cost in metres-equivalent; lower wins:
//
//	score = distance_m
//	      − IdleBonusMPerMin × min(idle_s/60, IdleCapMin)
//	      − RatingBonusM × (rating − DefaultRating)
//
// Distance dominates (riders wait less); idle time spreads work across the fleet; rating breaks
// near-ties in favour of better-rated drivers.
func Score(p ScoreParams, c Candidate) float64 {
	rating := c.Rating
	if rating <= 0 {
		rating = p.DefaultRating
	}
	idleMin := math.Min(math.Max(c.IdleS, 0)/60, p.IdleCapMin)
	return c.DistanceM - p.IdleBonusMPerMin*idleMin - p.RatingBonusM*(rating-p.DefaultRating)
}

// Rank scores cs and sorts them best first (ties by distance, then driver id, so ranking is deterministic).
func Rank(p ScoreParams, cs []Candidate) {
	for i := range cs {
		cs[i].Score = Score(p, cs[i])
	}
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].Score != cs[j].Score {
			return cs[i].Score < cs[j].Score
		}
		if cs[i].DistanceM != cs[j].DistanceM {
			return cs[i].DistanceM < cs[j].DistanceM
		}
		return cs[i].DriverID < cs[j].DriverID
	})
}
