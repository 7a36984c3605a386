package dispatch

import (
	"fmt"
	"time"
)

// RideStatus is a ride's state. Transitions follow the design's ride lifecycle (see Transition).
type RideStatus string

// Ride statuses.
const (
	RideRequested  RideStatus = "REQUESTED"
	RideAccepted   RideStatus = "ACCEPTED"
	RideInProgress RideStatus = "IN_PROGRESS"
	RideCompleted  RideStatus = "COMPLETED"
	RideCancelled  RideStatus = "CANCELLED"
	RideUnmatched  RideStatus = "UNMATCHED"
)

// Active reports whether a ride in status s holds its driver (ACCEPTED or IN_PROGRESS).
func (s RideStatus) Active() bool { return s == RideAccepted || s == RideInProgress }

// Open reports whether a ride in status s still counts as the rider's open ride.
func (s RideStatus) Open() bool { return s == RideRequested || s.Active() }

// OfferStatus is an offer's state.
type OfferStatus string

// Offer statuses.
const (
	OfferPending   OfferStatus = "PENDING"
	OfferAccepted  OfferStatus = "ACCEPTED"
	OfferDeclined  OfferStatus = "DECLINED"
	OfferExpired   OfferStatus = "EXPIRED"
	OfferCancelled OfferStatus = "CANCELLED"
)

// DriverStatus is a driver's availability as kept in Redis.
type DriverStatus string

// Driver statuses. Drivers set offline, available and paused; flagdown sets busy (on an offer or
// a ride in progress) and navigating (driving to a pickup).
const (
	DriverOffline    DriverStatus = "offline"
	DriverAvailable  DriverStatus = "available"
	DriverPaused     DriverStatus = "paused"
	DriverBusy       DriverStatus = "busy"
	DriverNavigating DriverStatus = "navigating"
	// DriverUnknown is only ever an answer to a ping that named no status from a driver of whom
	// Redis holds no state (it restarted empty, or his state expired): flagdown does not know
	// whether he is online, offers him nothing, and his app must send its status with the next ping.
	DriverUnknown DriverStatus = "unknown"
)

// ParseClientDriverStatus accepts the statuses a driver's app may set: offline, available, paused.
func ParseClientDriverStatus(field, s string) (DriverStatus, error) {
	switch DriverStatus(s) {
	case DriverOffline, DriverAvailable, DriverPaused:
		return DriverStatus(s), nil
	}
	return "", Invalid(field, "must be one of offline, available, paused (busy and navigating are set by flagdown)")
}

// Action is something a rider or driver does to a ride.
type Action string

// Actions on a ride.
const (
	ActionAccept   Action = "accept"
	ActionDecline  Action = "decline"
	ActionStart    Action = "start"
	ActionComplete Action = "complete"
	ActionCancel   Action = "cancel"
	// ActionReopen: the system takes an ACCEPTED ride from a driver who went offline.
	ActionReopen Action = "reopen"
	// ActionExpire: the system records that the offered driver let the offer window pass.
	ActionExpire Action = "expire"
	// ActionOffer: the system offers a REQUESTED ride to a driver.
	ActionOffer Action = "offer"
	// ActionUnmatch: the system gives up on a ride nobody could be offered within the retry budget.
	ActionUnmatch Action = "unmatch"
)

// Actor is who performs an action.
type Actor string

// Actors.
const (
	ActorRider  Actor = "rider"
	ActorDriver Actor = "driver"
	ActorSystem Actor = "system"
)

// Transition returns the status a ride in status from moves to when actor performs action, or a
// conflict error (ReasonIllegalTransition, details.current_status) naming the current state.
// It is the one statement of the ride lifecycle; every change of a ride's status goes through it
// (shared/lifecycle):
//
//	REQUESTED --offer(system)--> REQUESTED (an offer is pending)
//	REQUESTED --accept(driver)--> ACCEPTED --start(driver)--> IN_PROGRESS --complete(driver)--> COMPLETED
//	REQUESTED --decline(driver) | expire(system)--> REQUESTED (matched again without him)
//	REQUESTED --unmatch(system)--> UNMATCHED (nobody within the retry budget)
//	REQUESTED|ACCEPTED --cancel(rider)--> CANCELLED
//	ACCEPTED --cancel(driver) | reopen(system)--> REQUESTED (re-opened, matched again without him)
//	REQUESTED|ACCEPTED|IN_PROGRESS --cancel(system)--> CANCELLED
func Transition(from RideStatus, action Action, actor Actor) (RideStatus, error) {
	switch {
	case action == ActionAccept && from == RideRequested && actor == ActorDriver:
		return RideAccepted, nil
	case action == ActionDecline && from == RideRequested && actor == ActorDriver:
		return RideRequested, nil
	case action == ActionStart && from == RideAccepted && actor == ActorDriver:
		return RideInProgress, nil
	case action == ActionComplete && from == RideInProgress && actor == ActorDriver:
		return RideCompleted, nil
	case action == ActionCancel && actor == ActorRider && (from == RideRequested || from == RideAccepted):
		return RideCancelled, nil
	case action == ActionCancel && actor == ActorDriver && from == RideAccepted:
		return RideRequested, nil
	case action == ActionCancel && actor == ActorSystem && from.Open():
		return RideCancelled, nil
	case action == ActionReopen && actor == ActorSystem && from == RideAccepted:
		return RideRequested, nil
	case (action == ActionExpire || action == ActionOffer) && actor == ActorSystem && from == RideRequested:
		return RideRequested, nil
	case action == ActionUnmatch && actor == ActorSystem && from == RideRequested:
		return RideUnmatched, nil
	}
	return "", Conflict(ReasonIllegalTransition,
		fmt.Sprintf("cannot %s a ride that is %s (as %s)", action, from, actor)).With("current_status", string(from))
}

// CheckOfferAnswer decides whether driverID may answer (accept or decline) his offer of a ride:
// latest is the newest offer of that ride to him (nil when none) and now PostgreSQL's clock. It
// returns nil when latest is PENDING and its window is open, otherwise a conflict: offer_expired when
// his offer is (or should already be) EXPIRED, not_your_offer when he holds no offer or it was
// decided otherwise. It is the one rule for why an accept or a decline fails.
func CheckOfferAnswer(latest *Offer, driverID string, now time.Time) error {
	switch {
	case latest == nil:
		return Conflict(ReasonNotYourOffer, fmt.Sprintf("driver %s holds no offer for this ride", driverID))
	case latest.Status == OfferPending && latest.ExpiresAt.After(now):
		return nil
	case latest.Status == OfferPending || latest.Status == OfferExpired:
		return Conflict(ReasonOfferExpired, "the offer window closed at "+latest.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	return Conflict(ReasonNotYourOffer, fmt.Sprintf("the offer to driver %s is %s", driverID, latest.Status))
}

// Ride is a ride as stored in PostgreSQL.
type Ride struct {
	ID                string
	RiderID           string
	Status            RideStatus
	Pickup, Dropoff   Point
	DriverID          string
	FareEstimateCents int64
	// EstDistanceM is the estimated road distance pickup→dropoff in metres.
	EstDistanceM float64
	// EstDurationS is the estimated driving time pickup→dropoff in seconds.
	EstDurationS float64
	// SurgeMultiplier is the surge multiplier the rider was charged (FareEstimateCents includes it);
	// 1.0 without surge (a value below 1.0 is stored as 1.0).
	SurgeMultiplier float64
	// SurgeComputed is the multiplier computed for the pickup's cell when the ride was requested
	// (what shadow mode would have charged); nil when surge was off.
	SurgeComputed *float64
	// QuotedWaitS is the pickup wait the rider was quoted, seconds (EstimateWait); nil when no
	// driver was near.
	QuotedWaitS *float64
	// QuotedWaitCalS is the calibration part of QuotedWaitS, seconds (WaitEstimate.CalibrationS as
	// the rider was quoted it); nil when no wait was quoted.
	QuotedWaitCalS *float64
	MatchAttempts  int
	MatchNote      string
	// Version is rides.version: it grows by one with every status change (see Assignment.RideVersion).
	Version   int64
	CreatedAt time.Time
	// MatchStartedAt is when the current round of matching began (the request, or the last re-open):
	// the retry budget is counted from it.
	MatchStartedAt time.Time
	// FirstMatchAt is when the first match attempt finished (offered or not).
	FirstMatchAt   *time.Time
	FirstOfferedAt *time.Time
	AcceptedAt     *time.Time
	StartedAt      *time.Time
	CompletedAt    *time.Time
	CancelledAt    *time.Time
}

// Offer is a proposal of a ride to one driver, valid until ExpiresAt.
type Offer struct {
	ID       string
	RideID   string
	DriverID string
	Status   OfferStatus
	// DistanceM is the straight-line distance driver→pickup in metres when offered.
	DistanceM float64
	Score     float64
	CreatedAt time.Time
	ExpiresAt time.Time
}
