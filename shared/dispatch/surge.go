package dispatch

import (
	"math"
	"time"
)

// SurgeParams configure the surge multiplier of a cell (a geohash cell; the caller picks the
// precision). Multipliers are dimensionless factors on the fare: 1.0 is the normal fare.
type SurgeParams struct {
	// Floor is the lowest multiplier computed from data, ≥ 1.0 (surge never discounts the fare).
	Floor float64
	// Ceiling is the highest multiplier, ≥ Floor: a hard limit, applied at once.
	Ceiling float64
	// MaxStep is the most the multiplier may rise or fall towards its target in one update (> 0), so
	// riders do not see the price jump between two estimates. The Ceiling, the emergency cap and
	// missing data apply at once regardless.
	MaxStep float64
	// Threshold is the demand/supply ratio (requests per available driver) above which surge starts
	// (> 0; 1.0: more requests than drivers).
	Threshold float64
	// Sensitivity is the target's rise per unit of demand/supply ratio above Threshold (≥ 0):
	// target = 1 + Sensitivity × (ratio − Threshold).
	Sensitivity float64
	// MinDemand is the fewest requests in the window for a cell to surge (≥ 0): below it the target is
	// Floor, so one request in an empty cell does not price it at the Ceiling.
	MinDemand int
	// EmergencyCap is the highest multiplier while an emergency is declared (≥ 1.0; 1.0 suspends
	// surge), applied at once. Rule: New York's price-gouging law (General Business Law § 396-r)
	// forbids unconscionably excessive prices during an abnormal disruption of the market, and Uber
	// agreed with the New York Attorney General in 2014 to cap surge during emergencies.
	EmergencyCap float64
}

// DefaultSurgeParams are the defaults of the surge calculator: floor 1.0, ceiling 3.0, at most 0.25
// change per update, surge from 1 request per driver, +0.5 per unit of ratio above it, at least 3
// requests, emergency cap 1.0 (no surge in an emergency).
func DefaultSurgeParams() SurgeParams {
	return SurgeParams{Floor: 1, Ceiling: 3, MaxStep: 0.25, Threshold: 1, Sensitivity: 0.5, MinDemand: 3, EmergencyCap: 1}
}

// Validate checks the rules documented on each field; the error names the first broken one.
func (p SurgeParams) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !finite(p.Floor) || p.Floor < 1:
		return Invalid("surge.floor", "must be a number ≥ 1.0 (surge never discounts the fare)")
	case !finite(p.Ceiling) || p.Ceiling < p.Floor:
		return Invalid("surge.ceiling", "must be a number ≥ the floor")
	case !finite(p.MaxStep) || p.MaxStep <= 0:
		return Invalid("surge.max_step", "must be a number > 0")
	case !finite(p.Threshold) || p.Threshold <= 0:
		return Invalid("surge.threshold", "must be a number > 0")
	case !finite(p.Sensitivity) || p.Sensitivity < 0:
		return Invalid("surge.sensitivity", "must be a number ≥ 0")
	case p.MinDemand < 0:
		return Invalid("surge.min_demand", "must be ≥ 0")
	case !finite(p.EmergencyCap) || p.EmergencyCap < 1:
		return Invalid("surge.emergency_cap", "must be a number ≥ 1.0")
	}
	return nil
}

// CellLoad is what was seen in one cell over the surge window.
type CellLoad struct {
	// Supply is the number of available drivers in the cell (≥ 0).
	Supply int
	// Demand is the number of ride requests from the cell in the window (≥ 0).
	Demand int
}

// SurgeTarget is the multiplier the cell's load calls for, before the step limit and the emergency
// cap: Floor when Demand < MinDemand or the ratio Demand / Supply is at most Threshold (a cell with
// no driver and enough demand has an infinite ratio), otherwise 1 + Sensitivity × (ratio −
// Threshold), within [Floor, Ceiling]. A load with a negative count is no data: 1.0.
func SurgeTarget(p SurgeParams, load CellLoad) float64 {
	if load.Supply < 0 || load.Demand < 0 {
		return 1
	}
	if load.Demand < p.MinDemand || load.Demand == 0 {
		return p.Floor
	}
	ratio := math.Inf(1)
	if load.Supply > 0 {
		ratio = float64(load.Demand) / float64(load.Supply)
	}
	if ratio <= p.Threshold {
		return p.Floor
	}
	if math.IsInf(ratio, 1) {
		return p.Ceiling
	}
	return math.Min(p.Ceiling, math.Max(p.Floor, 1+p.Sensitivity*(ratio-p.Threshold)))
}

// SurgeMultiplier is a cell's new multiplier given its previous one (prev; not a finite number ≥ 1.0
// counts as 1.0) and its load (known false: no data for the cell). In order:
//   - no data (known false, or a negative count): 1.0 at once, whatever prev was, so a gap in the
//     data never charges riders;
//   - otherwise prev moves towards SurgeTarget by at most MaxStep, and stays within [Floor, Ceiling]
//     (a value outside, left by a change of configuration, is brought inside at once);
//   - during an emergency the result is at most EmergencyCap, at once.
func SurgeMultiplier(p SurgeParams, prev float64, load CellLoad, known, emergency bool) float64 {
	if !known || load.Supply < 0 || load.Demand < 0 {
		return 1
	}
	if math.IsNaN(prev) || math.IsInf(prev, 0) || prev < 1 {
		prev = 1
	}
	target := SurgeTarget(p, load)
	m := prev + math.Max(-p.MaxStep, math.Min(p.MaxStep, target-prev))
	m = math.Min(p.Ceiling, math.Max(p.Floor, m))
	if emergency {
		m = math.Min(m, p.EmergencyCap)
	}
	return m
}

// Surge updates every cell's multiplier with SurgeMultiplier: prev holds the multipliers of the last
// update by cell, loads this window's load by cell. The result has every cell of loads and of prev;
// a cell of prev with no load this time is no data (1.0). A cell in neither has multiplier 1.0.
func Surge(p SurgeParams, prev map[string]float64, loads map[string]CellLoad, emergency bool) map[string]float64 {
	out := make(map[string]float64, max(len(prev), len(loads)))
	for cell := range prev {
		if _, ok := loads[cell]; !ok {
			out[cell] = 1
		}
	}
	for cell, load := range loads {
		last, ok := prev[cell]
		if !ok {
			last = 1
		}
		out[cell] = SurgeMultiplier(p, last, load, true, emergency)
	}
	return out
}

// SurgeMode says what is done with a cell's multiplier (FLAGDOWN_SURGE_MODE).
type SurgeMode string

// Surge modes.
const (
	// SurgeOff computes nothing and charges 1.0.
	SurgeOff SurgeMode = "off"
	// SurgeShadow computes and logs the multiplier and charges 1.0: surge is watched before it
	// prices anyone (the default).
	SurgeShadow SurgeMode = "shadow"
	// SurgeOn charges the computed multiplier.
	SurgeOn SurgeMode = "on"
)

// ParseSurgeMode accepts off, shadow and on.
func ParseSurgeMode(field, s string) (SurgeMode, error) {
	switch SurgeMode(s) {
	case SurgeOff, SurgeShadow, SurgeOn:
		return SurgeMode(s), nil
	}
	return "", Invalid(field, "must be one of off, shadow, on")
}

// Charged is the multiplier a rider pays in mode for a computed multiplier: the computed one (as
// RoundMultiplier) in SurgeOn, 1.0 in SurgeShadow and SurgeOff (and for any unknown mode).
func Charged(mode SurgeMode, computed float64) float64 {
	if mode != SurgeOn {
		return 1
	}
	return RoundMultiplier(computed)
}

// RoundMultiplier rounds m to 0.01, the precision riders are shown and rides record; a value that
// is not a finite number ≥ 1.0 is 1.0.
func RoundMultiplier(m float64) float64 {
	if math.IsNaN(m) || math.IsInf(m, 0) || m < 1 {
		return 1
	}
	return math.Round(m*100) / 100
}

// SurgedFare is the fare estimate e with multiplier m applied to the whole fare (minimum
// included), rounded to whole cents: round(e.FareCents × m). Distance and duration do not change.
func SurgedFare(e Estimate, m float64) Estimate {
	e.FareCents = int64(math.Round(float64(e.FareCents) * RoundMultiplier(m)))
	return e
}

// WaitEstimate is a predicted pickup wait, seconds, and its two parts.
type WaitEstimate struct {
	// MatchS is the recent time from a ride's request to its accept (an EWMA, see MatchDelayAlpha),
	// seconds; 0 before any ride was accepted.
	MatchS float64
	// DriveS is the nearest available driver's drive to the pickup: straight-line distance × the
	// drive pace (DrivePace.SecondsPerMetre: learned from pickups, else road factor / average
	// speed), seconds.
	DriveS float64
	// CalibrationS is the learned correction of the estimate, seconds (may be negative; 0 without
	// data): the recent mean residual of the distance-based estimate (what the waits quoted in the
	// pickup's cell at this hour of day missed without their calibration; FoldWaitResidual,
	// Calibrate).
	CalibrationS float64
	// TotalS is MatchS + DriveS + CalibrationS rounded to whole seconds, at least 0 (Calibrate).
	TotalS float64
}

// WaitCalibrationAlpha is the weight of the newest error in a cell's wait calibration once it has
// 1/α samples; before that each sample weighs 1/n, so the first samples give their plain mean and
// the calibration is unbiased from the start. 0.05: about the last 20 pickups of the cell and hour.
const WaitCalibrationAlpha = 0.05

// WaitCalibrationMinSamples is how many pickups a cell needs at an hour of day before its own
// calibration is used; below it the city's at that hour is.
const WaitCalibrationMinSamples = 5

// FoldWaitResidual is a calibration's next value after one more pickup whose residual was
// residualS seconds: the actual request → pickup time less the distance-based part of its quote
// (the quote without the calibration it held). It is an exponentially weighted mean of the
// residuals: cur + max(α, 1/(n+1)) × (residualS − cur), so the first samples give their plain
// mean. It never adds a quote's error to the calibration of now: a pickup lands about one wait
// after its quote, once the pickups of the rides quoted since moved the calibration, and adding
// errors would correct one error once per pickup in flight (an integrator with a delay, which
// swings once that lag × α exceeds 1).
func FoldWaitResidual(cur float64, n int, residualS float64) float64 {
	if math.IsNaN(residualS) || math.IsInf(residualS, 0) {
		return cur
	}
	return cur + math.Max(WaitCalibrationAlpha, 1/float64(n+1))*(residualS-cur)
}

// Calibrate is w with calibration calS (seconds) added: CalibrationS set, TotalS recomputed. The
// total is never below 0, and CalibrationS is the part as applied: a calibration that would take
// the total below 0 is only −(MatchS + DriveS), so the parts always add up to the total and the
// distance-based part of a quote is known when its pickup is folded (FoldWaitResidual), also for a
// quote the calibration took to 0 (leaving those out would keep a calibration that undershoots
// from learning from the very rides it misquotes).
func Calibrate(w WaitEstimate, calS float64) WaitEstimate {
	if math.IsNaN(calS) || math.IsInf(calS, 0) {
		calS = 0
	}
	calS = math.Max(calS, -(w.MatchS + w.DriveS))
	w.CalibrationS = math.Round(calS*10) / 10
	w.TotalS = math.Max(0, math.Round(w.MatchS+w.DriveS+calS))
	return w
}

// RiderSeconds is a duration d measured on the platform's clock in the riders' seconds: d ×
// simSpeedup (Rules.SimSpeedup; a value that is not a finite number > 0 counts as 1). In a real city
// the two clocks are one; under a replay in simulated time (FLAGDOWN_SIM_SPEEDUP = its --speedup)
// the riders wait, and the drivers drive, simSpeedup seconds per second of the platform's, so a
// wait estimate adds its match part (request → accept, the platform's clock) to its drive part
// (seconds of driving) only once both are in the riders' seconds, and its calibration compares
// it with a request → pickup time in the same seconds.
func RiderSeconds(d time.Duration, simSpeedup float64) float64 {
	if !(simSpeedup > 0) || math.IsInf(simSpeedup, 0) {
		simSpeedup = 1
	}
	return d.Seconds() * simSpeedup
}

// MatchDelayAlpha is the weight of the newest sample in the EWMA of match delays: ewma ← α × delay
// + (1 − α) × ewma. 0.1 makes it follow about the last 10 accepts (the mean age of the weights is
// (1 − α) / α = 9 samples), long enough to smooth one slow accept, short enough to follow a rush.
const MatchDelayAlpha = 0.1

// DrivePaceAlpha is the weight of the newest pickup in the learned drive pace once there are
// 1/α pickups; before that each weighs 1/n, so the first pickups give their plain means and the
// pace is unbiased from the start. 0.02: about the last 50 pickups of the city.
const DrivePaceAlpha = 0.02

// DrivePaceMinSamples is how many pickups the learned drive pace needs before the wait estimate
// uses it instead of the configured one (FLAGDOWN_ROAD_FACTOR / FLAGDOWN_AVG_SPEED_MPS).
const DrivePaceMinSamples = 10

// DrivePace is the drive pace learned from pickups: how long drivers took from their accept to the
// pickup against how far from it they were (straight line) when offered the ride. It is a ratio of
// two exponentially weighted means, so a short drive (a few metres, a few seconds) cannot make the
// pace jump the way a mean of per-ride ratios would.
type DrivePace struct {
	// DriveS is the weighted mean time from an accept to the pickup, seconds in the riders' time.
	DriveS float64
	// DistM is the weighted mean straight-line distance driver → pickup at the offer, metres.
	DistM float64
	// N is how many pickups were folded.
	N int
}

// FoldDrivePace is p after one more pickup: driveS seconds from the accept to the pickup (riders'
// time), the driver distM metres away in a straight line when offered. Both means move by
// max(DrivePaceAlpha, 1/(N+1)) towards the sample. A sample that is not a finite number ≥ 0 is
// ignored.
func FoldDrivePace(p DrivePace, driveS, distM float64) DrivePace {
	for _, v := range []float64{driveS, distM} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return p
		}
	}
	w := math.Max(DrivePaceAlpha, 1/float64(p.N+1))
	p.DriveS += w * (driveS - p.DriveS)
	p.DistM += w * (distM - p.DistM)
	p.N++
	return p
}

// SecondsPerMetre is the drive pace the wait estimate uses, seconds per straight-line metre: the
// learned one (DriveS / DistM) once p has DrivePaceMinSamples pickups over a mean distance of at
// least a metre, else the configured one, max(1, roadFactor) / avgSpeedMPS; 0 when neither is a
// finite number > 0 (no estimate).
func (p DrivePace) SecondsPerMetre(roadFactor, avgSpeedMPS float64) float64 {
	if p.N >= DrivePaceMinSamples && p.DistM >= 1 {
		if v := p.DriveS / p.DistM; v > 0 && !math.IsInf(v, 0) {
			return v
		}
	}
	if !(avgSpeedMPS > 0) || math.IsInf(avgSpeedMPS, 0) {
		return 0
	}
	return math.Max(1, roadFactor) / avgSpeedMPS
}

// WindowDriveS is the drive part's ceiling under windowed matching (batch, or auto), seconds in the
// riders' time: the recent mean drive from an accept to the pickup (DriveS) once p has
// DrivePaceMinSamples pickups, else 0 (no ceiling). A window gives each ride the driver its
// assignment prefers, and a ride whose nearest available driver is far waits for a later window
// (a driver freed near it) rather than taking him, so its drive is about the recent pickups', not
// the nearest driver's now; greedy offers the nearest driver at once and has no ceiling.
func (p DrivePace) WindowDriveS() float64 {
	if p.N < DrivePaceMinSamples || !(p.DriveS > 0) || math.IsInf(p.DriveS, 0) {
		return 0
	}
	return p.DriveS
}

// CapDrive is w with its drive part at most capS seconds (a capS that is not a finite number > 0
// leaves w as it is), TotalS recomputed; apply it before Calibrate, whose residual is taken over
// the drive part as quoted.
func CapDrive(w WaitEstimate, capS float64) WaitEstimate {
	if !(capS > 0) || math.IsInf(capS, 0) || w.DriveS <= capS {
		return w
	}
	w.DriveS = math.Round(capS*10) / 10
	w.TotalS = math.Round(w.MatchS + w.DriveS + w.CalibrationS)
	return w
}

// EstimateWait predicts the pickup wait of a ride requested now: the recent match delay
// (matchDelayS, seconds, ≥ 0; 0 when unknown) plus the drive of the nearest available driver,
// nearestM metres away in a straight line, at paceSPerM seconds per straight-line metre
// (DrivePace.SecondsPerMetre). ok is false when no driver is near (nearestM < 0) or the pace is
// not a finite number > 0: no estimate.
func EstimateWait(matchDelayS, nearestM, paceSPerM float64) (WaitEstimate, bool) {
	if nearestM < 0 || !(paceSPerM > 0) || math.IsInf(paceSPerM, 0) || math.IsNaN(nearestM) {
		return WaitEstimate{}, false
	}
	if !(matchDelayS > 0) || math.IsInf(matchDelayS, 0) {
		matchDelayS = 0
	}
	drive := nearestM * paceSPerM
	return WaitEstimate{MatchS: math.Round(matchDelayS*10) / 10, DriveS: math.Round(drive*10) / 10,
		TotalS: math.Round(matchDelayS + drive)}, true
}

// CapSurge brings a stored multiplier m within the limits that apply at once: not a finite number ≥
// 1.0 is 1.0; at most Ceiling (and at least Floor); during an emergency at most EmergencyCap.
func CapSurge(p SurgeParams, m float64, emergency bool) float64 {
	if math.IsNaN(m) || math.IsInf(m, 0) || m < 1 {
		m = 1
	}
	m = math.Min(p.Ceiling, math.Max(p.Floor, m))
	if emergency {
		m = math.Min(m, p.EmergencyCap)
	}
	return m
}
