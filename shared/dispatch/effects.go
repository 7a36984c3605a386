package dispatch

import "time"

// Effects are the Redis changes a committed PostgreSQL change asks for. The lifecycle service
// returns them from a transaction and applies them only after the commit (never before), so Redis
// is a projection of PostgreSQL: an effect that fails to apply is left to reconcile, which re-derives
// it from PostgreSQL. Every assignment effect carries its versions, so applying one late, twice or
// out of order is a no-op (see Assignment).
type Effects struct {
	// Assignments are changes of drivers' active rides, applied compare-and-set on Epoch.
	Assignments []Assignment
	// ReleaseOffers are offer locks to delete (compare-and-delete on the offer id).
	ReleaseOffers []OfferRelease
	// RetryTimers are retry timers to arm.
	RetryTimers []RetryTimer
	// ClearRetryTimers are rides whose retry timer must be disarmed.
	ClearRetryTimers []string
	// BatchJoins are rides to put back into the batch for the next window (batch matching: rides
	// the last window's assignment left without a driver).
	BatchJoins []string
	// Misses are drivers who let an offer expire (counted against them in the score).
	Misses []string
	// Offline are drivers to mark offline in Redis unless their heartbeat lives again.
	Offline []string
	// MatchDelaysS are the times from a ride's (re-)request to its accept, seconds on PostgreSQL's
	// clock, to fold into the recent match delay of the wait estimate (EstimateWait).
	MatchDelaysS []float64
	// WaitErrors are the residuals of the waits quoted to rides picked up, to fold into the wait
	// calibration (FoldWaitResidual).
	WaitErrors []WaitError
	// DriveSamples are the drives of drivers to their pickups, to fold into the learned drive pace
	// of the wait estimate (FoldDrivePace).
	DriveSamples []DriveSample
}

// DriveSample is one driver's drive from his accept to the pickup.
type DriveSample struct {
	// DriveS is the time from the accept to the pickup (the ride's start), seconds in the riders'
	// time (RiderSeconds).
	DriveS float64
	// DistM is the straight-line distance driver → pickup when he was offered the ride, metres.
	DistM float64
}

// WaitError is how far off the distance-based part of the wait quoted to one ride was.
type WaitError struct {
	// Pickup is the ride's pickup and RequestedAt its request (the calibration's cell and hour).
	Pickup      Point
	RequestedAt time.Time
	// ResidualS is the actual time from request to pickup (the ride's start) less the quoted wait
	// without its calibration part, seconds.
	ResidualS float64
}

// Add appends the effects of o to e.
func (e *Effects) Add(o Effects) {
	e.Assignments = append(e.Assignments, o.Assignments...)
	e.ReleaseOffers = append(e.ReleaseOffers, o.ReleaseOffers...)
	e.RetryTimers = append(e.RetryTimers, o.RetryTimers...)
	e.ClearRetryTimers = append(e.ClearRetryTimers, o.ClearRetryTimers...)
	e.BatchJoins = append(e.BatchJoins, o.BatchJoins...)
	e.Misses = append(e.Misses, o.Misses...)
	e.Offline = append(e.Offline, o.Offline...)
	e.MatchDelaysS = append(e.MatchDelaysS, o.MatchDelaysS...)
	e.WaitErrors = append(e.WaitErrors, o.WaitErrors...)
	e.DriveSamples = append(e.DriveSamples, o.DriveSamples...)
}

// Empty reports whether e asks for nothing.
func (e Effects) Empty() bool {
	return len(e.Assignments)+len(e.ReleaseOffers)+len(e.RetryTimers)+len(e.ClearRetryTimers)+len(e.BatchJoins)+len(e.Misses)+len(e.Offline)+len(e.MatchDelaysS)+len(e.WaitErrors)+len(e.DriveSamples) == 0
}

// Assignment is a driver's assignment as PostgreSQL holds it after a change (the driver_assignments
// row): his active ride, or none. Redis applies it only when Epoch is newer than the epoch it holds
// for the driver, so a late, duplicated or snapshot-based write never moves Redis backwards.
type Assignment struct {
	DriverID string
	// Epoch is driver_assignments.epoch after the change; it grows by one with every change of the
	// driver's assignment, in commit order (the row is locked by the change).
	Epoch int64
	// RideID is the driver's active ride after the change; empty when he is free.
	RideID string
	// RideStatus is ACCEPTED or IN_PROGRESS when RideID is set, empty otherwise.
	RideStatus RideStatus
	// RideVersion is rides.version after the change of the ride named by RideID or, when the driver
	// is freed, of the ride he leaves (PrevRideID). It guards the ride's live position the same way.
	RideVersion int64
	// PrevRideID is the ride the driver leaves with this change, empty when none.
	PrevRideID string
	// At, when set on a free assignment, is where the driver now is (the dropoff of a completed ride).
	At *Point
}

// DriverStatusOnRide is the Redis status of a driver whose ride is in status s: navigating to the
// pickup while ACCEPTED, busy while IN_PROGRESS.
func DriverStatusOnRide(s RideStatus) DriverStatus {
	if s == RideInProgress {
		return DriverBusy
	}
	return DriverNavigating
}

// OfferRelease asks to delete a driver's offer lock if it still holds OfferID.
type OfferRelease struct {
	DriverID string
	OfferID  string
	// Requeue puts a still-available, alive driver back in the available set (a decline or a
	// cancelled ride: he is free for other offers at once).
	Requeue bool
}

// RetryTimer asks to arm a ride's retry timer.
type RetryTimer struct {
	RideID string
	// Attempt is the number of match attempts so far (informational, stored as the timer's value).
	Attempt int
	// Wait is how long until the timer fires.
	Wait time.Duration
}

// RetryWait is the wait before match attempt attempts+1 of a ride nobody could be offered:
// base × 2^(attempts−1), capped at max (FLAGDOWN_RETRY_BASE, FLAGDOWN_RETRY_MAX_WAIT).
func RetryWait(base, max time.Duration, attempts int) time.Duration {
	w := base
	for i := 1; i < attempts && w < max; i++ {
		w *= 2
	}
	if w > max {
		w = max
	}
	return w
}
