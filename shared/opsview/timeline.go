package opsview

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Timeline is a ride's history as PostgreSQL holds it: the rides row and its offers rows, laid out
// as events in time order.
type Timeline struct {
	Ride   RideDetail      `json:"ride"`
	Events []TimelineEvent `json:"events"`
}

// RideDetail is the rides row of a Timeline.
type RideDetail struct {
	ID       string              `json:"id"`
	RiderID  string              `json:"rider_id"`
	Status   dispatch.RideStatus `json:"status"`
	Pickup   Point               `json:"pickup"`
	Dropoff  Point               `json:"dropoff"`
	DriverID string              `json:"driver_id,omitempty"`
	// FareEstimateCents is the fare estimate in cents; EstDistanceM metres; EstDurationS seconds.
	FareEstimateCents int64   `json:"fare_estimate_cents"`
	EstDistanceM      float64 `json:"est_distance_m"`
	EstDurationS      float64 `json:"est_duration_s"`
	MatchAttempts     int     `json:"match_attempts"`
	MatchNote         string  `json:"match_note,omitempty"`
	// Offers is how many offers the ride had.
	Offers int `json:"offers"`
}

// Timeline event kinds.
const (
	EventRequested  = "requested"
	EventFirstMatch = "first_match"
	EventOffered    = "offered"
	// EventOfferAccepted, EventOfferDeclined, EventOfferExpired and EventOfferCancelled end an
	// offer (its status, lower-cased, after "offer_").
	EventOfferAccepted  = "offer_accepted"
	EventOfferDeclined  = "offer_declined"
	EventOfferExpired   = "offer_expired"
	EventOfferCancelled = "offer_cancelled"
	EventAccepted       = "accepted"
	EventStarted        = "started"
	EventCompleted      = "completed"
	EventCancelled      = "cancelled"
	// EventUnmatched is a ride given up as UNMATCHED (at its last update, with the last match
	// note); EventReopened marks that an accepted driver lost the ride again (a heartbeat that
	// expired, an abandoned ride): the rows keep no time of it, so it is placed right after the
	// accept it undid.
	EventUnmatched = "unmatched"
	EventReopened  = "reopened"
)

// TimelineEvent is one step of a ride.
type TimelineEvent struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// DriverID names the driver of an offer event, or of accepted/started/completed.
	DriverID string `json:"driver_id,omitempty"`
	// DistanceM is an offer's straight-line distance driver→pickup, metres.
	DistanceM float64 `json:"distance_m,omitempty"`
	// Detail is free text: who cancelled and why, the last match note.
	Detail string `json:"detail,omitempty"`
}

// Timeline reads ride rideID and its offers (one query each). An invalid id is CodeInvalidArgument
// on "ride_id"; a ride that does not exist CodeNotFound.
func (rd *Reader) Timeline(ctx context.Context, rideID string) (*Timeline, error) {
	if err := dispatch.ValidateRideID("ride_id", rideID); err != nil {
		return nil, err
	}
	var t Timeline
	r := &t.Ride
	var status string
	var cancelledBy, cancelReason string
	var created time.Time
	var firstMatch, accepted, started, completed, cancelled *time.Time
	var updated time.Time
	err := rd.DB.Pool.QueryRow(ctx, `SELECT id, rider_id, status, pickup_lat, pickup_lng, dropoff_lat, dropoff_lng,
		coalesce(driver_id, ''), fare_estimate_cents, est_distance_m, est_duration_s, match_attempts, coalesce(match_note, ''),
		coalesce(cancelled_by, ''), coalesce(cancel_reason, ''), created_at, first_match_at, accepted_at, started_at, completed_at, cancelled_at, updated_at
		FROM rides WHERE id = $1`, rideID).Scan(&r.ID, &r.RiderID, &status, &r.Pickup.Lat, &r.Pickup.Lng, &r.Dropoff.Lat, &r.Dropoff.Lng,
		&r.DriverID, &r.FareEstimateCents, &r.EstDistanceM, &r.EstDurationS, &r.MatchAttempts, &r.MatchNote,
		&cancelledBy, &cancelReason, &created, &firstMatch, &accepted, &started, &completed, &cancelled, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, dispatch.NotFound("ride", rideID)
	}
	if err != nil {
		return nil, dispatch.Unavailable("postgres", fmt.Errorf("opsview: ride: %w", err))
	}
	r.Status = dispatch.RideStatus(status)
	add := func(at *time.Time, kind, driver string, dist float64, detail string) {
		if at != nil {
			t.Events = append(t.Events, TimelineEvent{At: at.UTC(), Kind: kind, DriverID: driver, DistanceM: dist, Detail: detail})
		}
	}
	add(&created, EventRequested, "", 0, "")
	add(firstMatch, EventFirstMatch, "", 0, "")
	rows, err := rd.DB.Pool.Query(ctx, `SELECT driver_id, status, distance_m, created_at, expires_at, responded_at
		FROM offers WHERE ride_id = $1 ORDER BY created_at, id`, rideID)
	if err != nil {
		return nil, dispatch.Unavailable("postgres", fmt.Errorf("opsview: offers: %w", err))
	}
	for rows.Next() {
		var driver, st string
		var dist float64
		var at, expires time.Time
		var responded *time.Time
		if err := rows.Scan(&driver, &st, &dist, &at, &expires, &responded); err != nil {
			return nil, dispatch.Unavailable("postgres", fmt.Errorf("opsview: offers: %w", err))
		}
		r.Offers++
		add(&at, EventOffered, driver, dist, "")
		if dispatch.OfferStatus(st) == dispatch.OfferPending {
			continue
		}
		end := responded
		if end == nil {
			end = &expires // an expired offer has no response
		}
		add(end, "offer_"+strings.ToLower(st), driver, 0, "")
		if dispatch.OfferStatus(st) == dispatch.OfferAccepted && driver != r.DriverID && end != nil {
			reopened := end.Add(time.Millisecond)
			add(&reopened, EventReopened, driver, 0, "")
		}
	}
	if err := rows.Err(); err != nil {
		return nil, dispatch.Unavailable("postgres", fmt.Errorf("opsview: offers: %w", err))
	}
	add(accepted, EventAccepted, r.DriverID, 0, "")
	add(started, EventStarted, r.DriverID, 0, "")
	add(completed, EventCompleted, r.DriverID, 0, "")
	detail := cancelledBy
	if cancelReason != "" {
		detail += ": " + cancelReason
	}
	add(cancelled, EventCancelled, "", 0, detail)
	if r.Status == dispatch.RideUnmatched {
		add(&updated, EventUnmatched, "", 0, r.MatchNote)
	}
	sort.SliceStable(t.Events, func(i, j int) bool { return t.Events[i].At.Before(t.Events[j].At) })
	return &t, nil
}
