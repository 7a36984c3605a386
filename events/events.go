// Package events lists flagdown's CloudEvent types and one Go type per payload.
//
// Every event is a CloudEvents 1.0 event with JSON data (datacontenttype application/json).
// Type names are reverse-DNS and versioned (io.flagdown.<noun>.<verb>.v1); a breaking change to a
// payload is a new version, never an edit. subject is the ride id for ride events and the driver id
// for driver events. source is the URI-reference of the producer, e.g. /flagdown/order-create.
//
// Coordinates in payloads are WGS84 degrees as {lat, lng} objects, distances are metres, durations
// seconds, money the smallest currency unit (cents), timestamps RFC 3339 in UTC.
package events

import (
	"strings"
	"time"
)

// Event type names. Consumers reject any type not listed in Types.
const (
	// RideRequested: a rider asked for a ride (order-create). Triggers match.
	RideRequested = "io.flagdown.ride.requested.v1"
	// RideOffered: a driver was offered the ride and holds the offer lock (match).
	RideOffered = "io.flagdown.ride.offered.v1"
	// RideOfferDeclined: the offered driver declined (ride/decline). Triggers match without him.
	RideOfferDeclined = "io.flagdown.ride.offer.declined.v1"
	// RideAccepted: the offered driver accepted; the ride has its driver (accept).
	RideAccepted = "io.flagdown.ride.accepted.v1"
	// RideStarted: the rider is on board (ride/start).
	RideStarted = "io.flagdown.ride.started.v1"
	// RideCompleted: the ride ended at the dropoff (ride/complete).
	RideCompleted = "io.flagdown.ride.completed.v1"
	// RideCancelled: the rider or driver cancelled the ride for good (ride/cancel).
	RideCancelled = "io.flagdown.ride.cancelled.v1"
	// RideReopened: an ACCEPTED ride lost its driver, who cancelled it (ride/cancel) or went offline
	// (expiry-notification, reconcile: reason driver_offline); it is REQUESTED again, with a fresh
	// retry budget, and must be matched without him. Triggers match.
	RideReopened = "io.flagdown.ride.reopened.v1"
	// RideOfferExpired: the offered driver let the offer window pass (expiry-notification, reconcile).
	// Triggers match without him.
	RideOfferExpired = "io.flagdown.ride.offer.expired.v1"
	// RideRetry: a REQUESTED ride's retry timer fired, or reconcile found it idle (expiry-notification,
	// reconcile). Triggers match with a wider radius.
	RideRetry = "io.flagdown.ride.retry.v1"
	// RideUnmatched: nobody could be offered the ride within the retry budget; it is UNMATCHED (match).
	RideUnmatched = "io.flagdown.ride.unmatched.v1"
	// RideDriverOffline: the driver of an IN_PROGRESS ride stopped sending heartbeats (an alert; the
	// ride goes on) (expiry-notification, reconcile).
	RideDriverOffline = "io.flagdown.ride.driver.offline.v1"
	// RideOverdue: an IN_PROGRESS ride ran past FLAGDOWN_TRIP_CEILING from its start (an alert,
	// raised once per ride; the ride goes on) (reconcile).
	RideOverdue = "io.flagdown.ride.overdue.v1"
	// DriverStatusChanged: flagdown changed a driver's status on its own, e.g. offline after his
	// heartbeat expired (expiry-notification, reconcile). subject is the driver id.
	DriverStatusChanged = "io.flagdown.driver.status.changed.v1"
	// RedisKeyExpired: a flagdown timed key expired in Redis (expiry source). subject is the key.
	// Triggers expiry-notification.
	RedisKeyExpired = "io.flagdown.redis.key.expired.v1"
	// MatchBatchDue: a batch window closed (its batch timer expired; expiry-notification): the rides
	// waiting in the batch are to be assigned together. subject is the batch name. Triggers match.
	MatchBatchDue = "io.flagdown.match.batch.due.v1"
)

// Types is every event type flagdown produces or consumes, mapped to a one-line description.
var Types = map[string]string{
	RideRequested:       "a rider requested a ride",
	RideOffered:         "a driver was offered a ride",
	RideOfferDeclined:   "the offered driver declined the ride",
	RideAccepted:        "the offered driver accepted the ride, or a street hail paired a rider and a driver",
	RideStarted:         "the ride started at the pickup",
	RideCompleted:       "the ride completed at the dropoff",
	RideCancelled:       "the ride was cancelled",
	RideReopened:        "an accepted ride lost its driver and is matched again",
	RideOfferExpired:    "the offered driver let the offer window pass",
	RideRetry:           "a requested ride is matched again after a wait",
	RideUnmatched:       "nobody could be offered the ride within the retry budget",
	RideDriverOffline:   "the driver of a ride in progress stopped sending heartbeats",
	RideOverdue:         "a ride in progress ran past the trip ceiling",
	DriverStatusChanged: "flagdown changed a driver's status",
	RedisKeyExpired:     "a flagdown timed key expired in Redis",
	MatchBatchDue:       "a batch window closed: its waiting rides are assigned together",
}

// Known reports whether t is a flagdown event type.
func Known(t string) bool { _, ok := Types[t]; return ok }

// What an event's subject names, by its type (SubjectOf).
const (
	// SubjectRide: the subject of a ride event (io.flagdown.ride.*) is the ride id.
	SubjectRide = "ride"
	// SubjectDriver: the subject of a driver event (io.flagdown.driver.*) is the driver id.
	SubjectDriver = "driver"
)

// SubjectOf says what the subject of an event of type eventType names: SubjectRide,
// SubjectDriver, or "" for other events (a Redis key, a batch window).
func SubjectOf(eventType string) string {
	switch {
	case strings.HasPrefix(eventType, "io.flagdown.ride."):
		return SubjectRide
	case strings.HasPrefix(eventType, "io.flagdown.driver."):
		return SubjectDriver
	}
	return ""
}

// Point is a WGS84 position in degrees, latitude first.
type Point struct {
	// Lat is the latitude in degrees, -85.05112878..85.05112878 (the range Redis GEO can index).
	Lat float64 `json:"lat"`
	// Lng is the longitude in degrees, -180..180.
	Lng float64 `json:"lng"`
}

// RideRequestedData is the payload of RideRequested.
type RideRequestedData struct {
	RideID            string    `json:"ride_id"`
	RiderID           string    `json:"rider_id"`
	Pickup            Point     `json:"pickup"`
	Dropoff           Point     `json:"dropoff"`
	FareEstimateCents int64     `json:"fare_estimate_cents"`
	RequestedAt       time.Time `json:"requested_at"`
}

// RideOfferedData is the payload of RideOffered.
type RideOfferedData struct {
	RideID   string `json:"ride_id"`
	OfferID  string `json:"offer_id"`
	DriverID string `json:"driver_id"`
	// DistanceM is the straight-line distance from the driver to the pickup in metres.
	DistanceM float64 `json:"distance_m"`
	Pickup    Point   `json:"pickup"`
	// Dropoff is the ride's dropoff (added after v1's first release: absent in older events).
	Dropoff   *Point    `json:"dropoff,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

// RideOfferDeclinedData is the payload of RideOfferDeclined.
type RideOfferDeclinedData struct {
	RideID   string `json:"ride_id"`
	OfferID  string `json:"offer_id"`
	DriverID string `json:"driver_id"`
}

// RideAcceptedData is the payload of RideAccepted.
type RideAcceptedData struct {
	RideID string `json:"ride_id"`
	// OfferID is the offer the driver accepted; empty for a street hail (Hail), which has none.
	OfferID    string    `json:"offer_id"`
	DriverID   string    `json:"driver_id"`
	RiderID    string    `json:"rider_id"`
	AcceptedAt time.Time `json:"accepted_at"`
	// Version is rides.version after the change (0 in events older than the field): it grows with
	// every status change of the ride, so a consumer can drop a status older than one it has seen.
	Version int64 `json:"version,omitempty"`
	// Hail is true when a street-hail pairing created the ride ACCEPTED (functions/hail): either
	// side may be the one still waiting, so the driver is told too, not only the rider.
	Hail bool `json:"hail,omitempty"`
}

// RideTransitionData is the payload of RideStarted, RideCompleted, RideCancelled and RideReopened.
type RideTransitionData struct {
	RideID   string `json:"ride_id"`
	RiderID  string `json:"rider_id"`
	DriverID string `json:"driver_id,omitempty"`
	// From and To are ride statuses (REQUESTED, ACCEPTED, IN_PROGRESS, COMPLETED, CANCELLED).
	From string `json:"from"`
	To   string `json:"to"`
	// By is who caused the change: rider, driver or system.
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	// Version is rides.version after the change (0 in events older than the field); see
	// RideAcceptedData.Version.
	Version int64 `json:"version,omitempty"`
	// WithdrawnOfferID and WithdrawnOfferDriverID name the pending offer a cancel withdrew, empty
	// when there was none.
	WithdrawnOfferID       string `json:"withdrawn_offer_id,omitempty"`
	WithdrawnOfferDriverID string `json:"withdrawn_offer_driver_id,omitempty"`
}

// RideOfferExpiredData is the payload of RideOfferExpired.
type RideOfferExpiredData struct {
	RideID   string `json:"ride_id"`
	OfferID  string `json:"offer_id"`
	DriverID string `json:"driver_id"`
	// ExpiresAt is the end of the offer window that passed.
	ExpiresAt time.Time `json:"expires_at"`
}

// RideRetryData is the payload of RideRetry.
type RideRetryData struct {
	RideID string `json:"ride_id"`
	// Attempt is the number of match attempts so far.
	Attempt int `json:"attempt"`
	// Reason is retry_timer (the timer fired) or reconcile (found idle).
	Reason string `json:"reason"`
}

// MatchBatchDueData is the payload of MatchBatchDue.
type MatchBatchDueData struct {
	// Batch is the batch name (the event's subject; "city": one batch per deployment).
	Batch string `json:"batch"`
	// DeadlineMs is when the window closed, unix ms by Redis's clock (the batch timer's indexed
	// deadline): with Batch it names the window.
	DeadlineMs int64 `json:"deadline_ms"`
}

// RideUnmatchedData is the payload of RideUnmatched.
type RideUnmatchedData struct {
	RideID  string `json:"ride_id"`
	RiderID string `json:"rider_id"`
	// Attempts is the number of match attempts made.
	Attempts int `json:"attempts"`
	// Reason says why nobody was offered at the last attempt.
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Version is rides.version after the change (0 in events older than the field); see
	// RideAcceptedData.Version.
	Version int64 `json:"version,omitempty"`
}

// RideDriverOfflineData is the payload of RideDriverOffline.
type RideDriverOfflineData struct {
	RideID   string    `json:"ride_id"`
	DriverID string    `json:"driver_id"`
	Status   string    `json:"status"`
	At       time.Time `json:"at"`
}

// RideOverdueData is the payload of RideOverdue.
type RideOverdueData struct {
	RideID   string `json:"ride_id"`
	RiderID  string `json:"rider_id"`
	DriverID string `json:"driver_id"`
	// Status is the ride's status when the alert was raised (IN_PROGRESS).
	Status    string    `json:"status"`
	StartedAt time.Time `json:"started_at"`
	// CeilingS is the trip ceiling it ran past (FLAGDOWN_TRIP_CEILING), seconds.
	CeilingS float64   `json:"ceiling_s"`
	At       time.Time `json:"at"`
}

// DriverStatusChangedData is the payload of DriverStatusChanged.
type DriverStatusChangedData struct {
	DriverID string `json:"driver_id"`
	// From and To are driver statuses (offline, available, paused, busy, navigating).
	From string `json:"from"`
	To   string `json:"to"`
	// Reason is heartbeat_expired, or reconcile when the reconcile function found it.
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// RedisKeyExpiredData is the payload of RedisKeyExpired.
type RedisKeyExpiredData struct {
	// Key is the full Redis key name (also the subject).
	Key string `json:"key"`
	// Kind is heartbeat, offer_timer, offer_lock, retry or batch (redisstore.KeyKind).
	Kind string `json:"kind"`
	// ID is the driver id (heartbeat, offer_lock), offer id (offer_timer), ride id (retry) or batch timer from the key name.
	ID string `json:"id"`
	// DeadlineMs is the deadline indexed for the key, unix milliseconds (0 when unknown).
	DeadlineMs int64 `json:"deadline_ms"`
	// ObservedAt is when the expiry source saw the expiry.
	ObservedAt time.Time `json:"observed_at"`
	// Swept is true when the source found the key gone during its deadline sweep rather than
	// through Redis's expired notification (a notification it missed, or one still on its way).
	Swept bool `json:"swept"`
}
