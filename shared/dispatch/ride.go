package dispatch

import (
	"fmt"
	"time"
	"unicode"
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
// The rules are the ride lifecycle of the design notes:
//
//	REQUESTED --accept(driver)--> ACCEPTED --start(driver)--> IN_PROGRESS --complete(driver)--> COMPLETED
//	REQUESTED --decline(driver)--> REQUESTED (matched again without him)
//	REQUESTED|ACCEPTED --cancel(rider)--> CANCELLED
//	ACCEPTED --cancel(driver)--> REQUESTED (re-opened, matched again without him)
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
	}
	return "", Conflict(ReasonIllegalTransition,
		fmt.Sprintf("cannot %s a ride that is %s (as %s)", action, from, actor)).With("current_status", string(from))
}

// MaxIDLen is the longest rider or driver id accepted, in bytes.
const MaxIDLen = 128

// ValidateID checks a rider or driver id: 1..MaxIDLen bytes of printable, non-space characters.
func ValidateID(field, id string) error {
	if id == "" {
		return Invalid(field, "is required")
	}
	if len(id) > MaxIDLen {
		return Invalid(field, fmt.Sprintf("must be at most %d bytes", MaxIDLen))
	}
	for _, r := range id {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return Invalid(field, "must contain only printable characters without spaces")
		}
	}
	return nil
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
	EstDurationS  float64
	MatchAttempts int
	MatchNote     string
	CreatedAt     time.Time
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
