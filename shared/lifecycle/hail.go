package lifecycle

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/logging"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// HailResult is what one street-hail press did: it waits for its counterpart until ExpiresAt, or
// it paired and Ride is the new ACCEPTED ride.
type HailResult struct {
	// Waiting is true when the press waits (no counterpart yet); ExpiresAt is when its entry expires
	// (Redis's clock) and ExpiresIn how long after the press that is.
	Waiting   bool
	ExpiresAt time.Time
	ExpiresIn time.Duration
	// Ride is the ride the pairing created (ACCEPTED, its driver set), nil while waiting.
	Ride *dispatch.Ride
	// DistanceM is the distance between the two presses, metres (paired only).
	DistanceM float64
}

// Hail handles one street-hail press p (rules in shared/dispatch/hail.go) with the numbers of
// FLAGDOWN_HAIL_WINDOW and FLAGDOWN_HAIL_RADIUS_M:
//
//  1. a rider with an open ride, or a driver with an active ride, is refused at once (conflict
//     rider_has_open_ride / driver_busy, details.ride_id) and nothing is entered;
//  2. one Redis script (Store.Hail) decides against every other press atomically: refuse a press
//     that breaks a rule binding it to reality (hail_code_tries, hail_last_ping_stale,
//     hail_far_from_last_ping, hail_gps_jump: hailRefusal), wait, refuse (hail_ambiguous;
//     hail_driver_unavailable, details.driver_state), or take the one counterpart's entry and hold
//     the pair's driver against offers;
//  3. a pairing becomes, in one PostgreSQL transaction, a ride inserted ACCEPTED with that driver
//     (origin hail; pickup = the rider's press, dropoff = the rider's, fare estimated as for a
//     requested ride), his assignment (epoch bumped) and ride.accepted (hail: true) in the outbox;
//     a driver holding a live PENDING offer in PostgreSQL is refused (driver_busy), and the unique
//     indexes refuse a second active ride of the driver or open ride of the rider;
//  4. after the commit Redis gets the assignment (ApplyAssignment, the driver leaves the available
//     set) and the hold ends. When the transaction fails, the hold ends (the driver is available
//     again) and the counterpart's entry is put back unless the failure is the counterpart's own
//     (his open or active ride), so a refused press does not cost the other side its wait; when it
//     is the counterpart's own, his press stays gone and p is judged again (at most
//     maxHailAttempts times in all), so p waits or pairs with someone else instead of failing.
func (s *Service) Hail(ctx context.Context, p dispatch.HailPress) (HailResult, error) {
	if err := s.hailAllowed(ctx, p.Side, p.ID); err != nil {
		return HailResult{}, err
	}
	for attempt := 1; ; attempt++ {
		out, err := s.hailOnce(ctx, p)
		if err != nil && attempt < maxHailAttempts && counterpartsOwn(p.Side.Other(), err) {
			// PostgreSQL refused the counterpart (his open or active ride): his press is gone, and
			// this one is judged again against the others.
			continue
		}
		return out, err
	}
}

// maxHailAttempts bounds how often one press is judged again after PostgreSQL refused the
// counterpart it found.
const maxHailAttempts = 3

// hailOnce judges press p once (steps 2 to 4 of Hail).
func (s *Service) hailOnce(ctx context.Context, p dispatch.HailPress) (HailResult, error) {
	res, err := s.d.Redis.Hail(ctx, p, s.d.Rules.Hail, dispatch.HailHold)
	if err != nil {
		return HailResult{}, err
	}
	switch res.Outcome {
	case redisstore.HailWaiting:
		return HailResult{Waiting: true, ExpiresAt: res.ExpiresAt, ExpiresIn: res.ExpiresIn}, nil
	case redisstore.HailAmbiguous:
		return HailResult{}, dispatch.Conflict(dispatch.ReasonHailAmbiguous,
			"the hail found several counterparts nearby and pairs with none: hail again with the same short code (field code) on both phones")
	case redisstore.HailRefused:
		return HailResult{}, s.hailRefusal(p, res)
	case redisstore.HailUnavailable:
		return HailResult{}, dispatch.Conflict(dispatch.ReasonHailDriverUnavailable,
			"the driver cannot hail now: he must be online and available, without a ride, an offer or another pairing ("+res.DriverState+")").
			With("driver_state", res.DriverState)
	}
	ride := s.hailRide(p, res)
	_, err = s.change(ctx, nil, func(tx pgx.Tx, fx *dispatch.Effects) error {
		if err := pgstore.InsertHailedRide(ctx, tx, ride); err != nil {
			return err
		}
		if live, err := pgstore.DriverHasLiveOffer(ctx, tx, ride.DriverID); err != nil || live {
			if err == nil {
				err = dispatch.Conflict(dispatch.ReasonDriverBusy, "the driver holds a live offer of another ride")
			}
			return err
		}
		a, err := assign(ctx, tx, ride.DriverID, ride, dispatch.RideAccepted, ride.Version)
		if err != nil {
			return err
		}
		fx.Assignments = append(fx.Assignments, a)
		_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
			Type: events.RideAccepted, Source: s.Source, Subject: ride.ID,
			Data: events.RideAcceptedData{RideID: ride.ID, DriverID: ride.DriverID, RiderID: ride.RiderID,
				AcceptedAt: ride.AcceptedAt.UTC(), Version: ride.Version, Hail: true},
		})
		return err
	})
	bg := context.WithoutCancel(ctx)
	if _, rerr := s.d.Redis.ReleaseHailHold(bg, ride.DriverID); rerr != nil {
		s.d.Log.Error("release hail hold; it expires by itself", logging.DriverID(ride.DriverID), "err", rerr)
	}
	if err != nil {
		s.restoreCounterpart(bg, p.Side.Other(), res, err)
		return HailResult{}, err
	}
	return HailResult{Ride: ride, DistanceM: res.DistanceM}, nil
}

// hailRefusal is the error of press p that broke the rule res names (redisstore.Refused*): each
// names its rule and the setting behind it.
func (s *Service) hailRefusal(p dispatch.HailPress, res redisstore.HailResult) *dispatch.Error {
	rules := s.d.Rules.Hail
	elapsed := (time.Duration(res.Elapsed) * time.Millisecond).Round(100 * time.Millisecond)
	switch res.Refusal {
	case redisstore.RefusedCodeTries:
		wait := int(math.Ceil(res.Figure / 1000))
		return (&dispatch.Error{Code: dispatch.CodeRateLimited, Field: "code", Reason: dispatch.ReasonHailCodeTries,
			Message: fmt.Sprintf("code: %d wrong short codes within %s (FLAGDOWN_HAIL_CODE_MAX_WRONG, FLAGDOWN_HAIL_CODE_LOCKOUT): hail again in %d s",
				rules.CodeMaxWrong, rules.CodeLockout, wait)}).With("retry_after_s", max(wait, 1))
	case redisstore.RefusedStale:
		msg := "the driver has no accepted ping: ping, then hail"
		if res.Figure >= 0 {
			age := (time.Duration(res.Figure) * time.Millisecond).Round(time.Second)
			msg = fmt.Sprintf("the driver's last accepted ping is %s old, more than %s (FLAGDOWN_HAIL_PING_MAX_AGE): ping, then hail", age, rules.PingMaxAge)
		}
		return dispatch.Conflict(dispatch.ReasonHailLastPingStale, msg)
	case redisstore.RefusedFar:
		e := dispatch.Conflict(dispatch.ReasonHailFarFromLastPing, fmt.Sprintf(
			"lat: the press is %.0f m from the driver's last accepted ping, more than the hail radius plus GPS slack, %.0f m (FLAGDOWN_HAIL_RADIUS_M + FLAGDOWN_HAIL_GPS_SLACK_M): a driver hails where his pings put him",
			res.Figure, rules.RadiusM+rules.GPSSlackM))
		e.Field = "lat"
		return e
	default: // redisstore.RefusedGPSJump
		from := "the driver's last accepted ping"
		if p.Side == dispatch.HailRider {
			from = "the rider's previous press"
		}
		e := dispatch.Conflict(dispatch.ReasonHailGPSJump, fmt.Sprintf(
			"lat: the press is %.0f m from %s %s earlier, faster than FLAGDOWN_MAX_SPEED_MPS allows (the GPS-jump rule of pings)",
			res.Figure, from, elapsed))
		e.Field = "lat"
		return e
	}
}

// hailAllowed refuses a press of a rider who has an open ride or a driver who has an active ride,
// naming that ride (details.ride_id, current_status).
func (s *Service) hailAllowed(ctx context.Context, side dispatch.HailSide, id string) error {
	q := s.d.DB.Pool
	if side == dispatch.HailRider {
		open, err := pgstore.OpenRideOf(ctx, q, id)
		if err != nil || open == nil {
			return err
		}
		return dispatch.Conflict(dispatch.ReasonRiderHasOpenRide, "the rider already has an open ride").
			With("ride_id", open.ID).With("current_status", string(open.Status))
	}
	active, err := pgstore.CurrentRideOfDriver(ctx, q, id)
	if err != nil || active == nil {
		return err
	}
	return dispatch.Conflict(dispatch.ReasonDriverBusy, "the driver already has an active ride").
		With("ride_id", active.ID).With("current_status", string(active.Status))
}

// hailRide builds the ride of a pairing: the rider's press is the pickup and carries the dropoff.
func (s *Service) hailRide(p dispatch.HailPress, res redisstore.HailResult) *dispatch.Ride {
	riderID, driverID := p.ID, res.CounterpartID
	pickup, dropoff := p.Position, p.Dropoff
	if p.Side == dispatch.HailDriver {
		riderID, driverID = res.CounterpartID, p.ID
		pickup, dropoff = dispatch.Point{Lat: res.Counterpart.Lat, Lng: res.Counterpart.Lng}, res.Counterpart.Dropoff
	}
	if dropoff == nil { // an entry written without one (cannot happen: the function requires it of riders)
		dropoff = &pickup
	}
	est := dispatch.EstimateFare(s.d.Rules.Fare, pickup, *dropoff)
	return &dispatch.Ride{
		ID: uuid.NewString(), RiderID: riderID, DriverID: driverID, Status: dispatch.RideAccepted,
		Pickup: pickup, Dropoff: *dropoff,
		FareEstimateCents: est.FareCents, EstDistanceM: est.DistanceM, EstDurationS: est.DurationS,
	}
}

// restoreCounterpart puts the counterpart's entry back after a pairing failed, unless the failure
// is his own (the rider's open ride when he is the rider, the driver's active ride or offer when he
// is the driver).
func (s *Service) restoreCounterpart(ctx context.Context, side dispatch.HailSide, res redisstore.HailResult, cause error) {
	if counterpartsOwn(side, cause) {
		return
	}
	if _, err := s.d.Redis.RestoreHail(ctx, side, res.CounterpartID, res.Counterpart, res.CounterpartExpiry); err != nil {
		s.d.Log.Error("restore hail entry after a failed pairing", "side", string(side), "id", res.CounterpartID, "err", err)
	}
}

// counterpartsOwn reports whether err, a refused pairing, is the counterpart's own doing: the
// rider's open ride when the counterpart (of side) is the rider, the driver's active ride or live
// offer when he is the driver.
func counterpartsOwn(side dispatch.HailSide, err error) bool {
	reason := dispatch.AsError(err).Reason
	return (side == dispatch.HailRider && reason == dispatch.ReasonRiderHasOpenRide) ||
		(side == dispatch.HailDriver && reason == dispatch.ReasonDriverBusy)
}
