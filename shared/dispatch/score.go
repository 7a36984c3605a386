package dispatch

import (
	"math"
	"sort"
	"time"
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
	// MissPenaltyM: metres added per offer the driver let expire within MissMemory.
	MissPenaltyM float64
	// MissMemory is how long a missed offer counts.
	MissMemory time.Duration
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
	// Missed is the number of offers he let expire, the last at MissedAt.
	Missed   int
	MissedAt time.Time
	// Score is the cost computed by Rank: lower is better, in metres-equivalent.
	Score float64
}

// Score is a candidate's cost in metres-equivalent; lower wins:
//
//	score = distance_m
//	      − IdleBonusMPerMin × min(idle_s/60, IdleCapMin)
//	      − RatingBonusM × (rating − DefaultRating)
//	      + MissPenaltyM × missed offers (when the last miss is within MissMemory)
//
// Distance dominates (riders wait less); idle time spreads work across the fleet; rating breaks
// near-ties in favour of better-rated drivers; drivers who let offers expire rank lower for a while.
func Score(p ScoreParams, c Candidate) float64 {
	rating := c.Rating
	if rating <= 0 {
		rating = p.DefaultRating
	}
	idleMin := math.Min(math.Max(c.IdleS, 0)/60, p.IdleCapMin)
	miss := 0.0
	if c.Missed > 0 && time.Since(c.MissedAt) <= p.MissMemory {
		miss = p.MissPenaltyM * float64(c.Missed)
	}
	return c.DistanceM - p.IdleBonusMPerMin*idleMin - p.RatingBonusM*(rating-p.DefaultRating) + miss
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
