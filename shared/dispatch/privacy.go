package dispatch

import "math"

// The rider view of drivers' positions (the one owner of the coarsening rule): whatever a rider can
// read about drivers he is not riding with (functions/nearby for role rider, the waits of
// fare-estimate, order-create and a ride before it is accepted) is computed from RiderCell of each
// driver's position, never from the position itself: positions are cell centres, distances are
// measured to cell centres, a search radius is RiderRadiusM, waits are RoundWaitS. Each answer is
// then a function of the query and the cells alone, so no sequence of queries locates a stationary
// driver closer than his cell: the best estimate, the cell's centre, is off by 0.399 × RiderCellM
// (≈ 120 m) for half the drivers and by up to RiderCellHalfDiagonalM (docs/security.md).

// RiderCellM is the side, in metres, of the grid cells the rider view snaps drivers to: 300 m, so
// the centre of his cell, the best any rider can infer, is at least 100 m from a driver for more
// than half of the drivers (the median distance from a square's centre is 0.399 × its side).
const RiderCellM = 300

// RiderCellHalfDiagonalM is the farthest, in metres, a point can be from the centre of its
// RiderCell (half the cell's diagonal, plus a metre for the rounding of the centre and the longitude
// step's variation across a cell).
const RiderCellHalfDiagonalM = RiderCellM*math.Sqrt2/2 + 1

// RiderRadiusStepM is the step, in metres, a rider's search radius is rounded up to (RiderRadiusM).
const RiderRadiusStepM = RiderCellM / 2

// RiderWaitStepS is the step, in seconds, of every wait a rider is quoted (RoundWaitS): coarse
// enough that a wait does not refine a distance below the cell, fine enough to stay useful.
const RiderWaitStepS = 15

// RiderCell returns the centre of the cell of a grid of about RiderCellM metres the point p lies
// in: latitude in steps of RiderCellM metres of meridian, longitude in steps of RiderCellM metres
// along the parallel of the cell's latitude band (so a cell stays about RiderCellM wide away from
// the equator); WGS84 degrees rounded to 1e-6.
func RiderCell(p Point) Point {
	const mPerDeg = EarthRadiusM * math.Pi / 180
	latStep := RiderCellM / mPerDeg
	lat := (math.Floor(p.Lat/latStep) + 0.5) * latStep
	lngStep := RiderCellM / (mPerDeg * math.Cos(lat*math.Pi/180))
	lng := (math.Floor(p.Lng/lngStep) + 0.5) * lngStep
	return Point{Lat: math.Round(lat*1e6) / 1e6, Lng: math.Round(lng*1e6) / 1e6}
}

// RiderDistanceM is the distance a rider at from is shown to a driver at driver: to the centre of
// the driver's RiderCell, whole metres.
func RiderDistanceM(from, driver Point) float64 {
	return math.Round(DistanceM(from, RiderCell(driver)))
}

// RiderRadiusM is the search radius a rider's requested radius r (metres, > 0) is rounded up to: a
// whole number of RiderRadiusStepM.
func RiderRadiusM(r float64) float64 {
	return math.Max(1, math.Ceil(r/RiderRadiusStepM)) * RiderRadiusStepM
}

// RoundWaitS rounds a wait s (seconds, ≥ 0) to the nearest multiple of RiderWaitStepS.
func RoundWaitS(s float64) float64 {
	if !(s > 0) {
		return 0
	}
	return math.Round(s/RiderWaitStepS) * RiderWaitStepS
}

// RiderWait is w as a rider is quoted it: the match and drive parts rounded with RoundWaitS, the
// calibration (which depends on the cell and the hour, never on a driver) rounded to the nearest
// multiple of RiderWaitStepS with its sign and at least −(match + drive) (the part as applied, so
// the total, their sum, is at least 0).
func RiderWait(w WaitEstimate) WaitEstimate {
	m, d := RoundWaitS(w.MatchS), RoundWaitS(w.DriveS)
	c := 0.0
	if !math.IsNaN(w.CalibrationS) && !math.IsInf(w.CalibrationS, 0) {
		c = math.Round(w.CalibrationS/RiderWaitStepS) * RiderWaitStepS
	}
	c = math.Max(c, -(m + d)) // as applied: the parts add up to the total (Calibrate)
	if c == 0 {
		c = 0 // no negative zero in the answer
	}
	return WaitEstimate{MatchS: m, DriveS: d, CalibrationS: c, TotalS: m + d + c}
}
