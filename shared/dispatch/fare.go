package dispatch

import "math"

// FareParams are the fare-estimate parameters (config FLAGDOWN_FARE_*).
type FareParams struct {
	// BaseCents is the flag drop, cents.
	BaseCents int64
	// PerKmCents is charged per estimated road kilometre, cents.
	PerKmCents int64
	// PerMinCents is charged per estimated driving minute, cents.
	PerMinCents int64
	// MinimumCents is the lowest estimate, cents.
	MinimumCents int64
	// RoadFactor multiplies the straight-line distance to estimate the road distance (dimensionless, >= 1).
	RoadFactor float64
	// AvgSpeedMPS is the average driving speed for the duration estimate, metres per second.
	AvgSpeedMPS float64
}

// Estimate is a fare estimate and the figures it came from.
type Estimate struct {
	// FareCents is the estimated fare in cents.
	FareCents int64
	// DistanceM is the estimated road distance in metres.
	DistanceM float64
	// DurationS is the estimated driving time in seconds.
	DurationS float64
}

// EstimateFare computes
//
//	distance_m = haversine(pickup, dropoff) × RoadFactor
//	duration_s = distance_m / AvgSpeedMPS
//	fare       = max(MinimumCents, BaseCents + PerKmCents × distance_m/1000 + PerMinCents × duration_s/60)
//
// rounded to whole cents. The default parameters approximate a New York yellow-cab meter.
func EstimateFare(p FareParams, pickup, dropoff Point) Estimate {
	d := DistanceM(pickup, dropoff) * p.RoadFactor
	dur := 0.0
	if p.AvgSpeedMPS > 0 {
		dur = d / p.AvgSpeedMPS
	}
	fare := float64(p.BaseCents) + float64(p.PerKmCents)*d/1000 + float64(p.PerMinCents)*dur/60
	cents := int64(math.Round(fare))
	if cents < p.MinimumCents {
		cents = p.MinimumCents
	}
	return Estimate{FareCents: cents, DistanceM: math.Round(d*10) / 10, DurationS: math.Round(dur)}
}
