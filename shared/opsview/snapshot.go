// Package opsview is the read model of the live operations map (functions/ops-map): a Snapshot of
// the drivers in dispatch, the open rides and the offers in flight, built from Redis and PostgreSQL
// without scanning keys, a Hub that shares one snapshot a second between every viewer of a process,
// and a ride's Timeline from PostgreSQL.
//
// Where each figure comes from (every count is exact; position lists are capped at MaxPoints each):
//
//   - available drivers: the GEO set of available drivers (ZCARD; positions of a random sample,
//     ZRANDMEMBER + GEOPOS, when it holds more than MaxPoints);
//   - offered drivers = offers in flight: PENDING offers not past expires_at (offers_pending_by_driver
//     is a partial index on exactly those rows); a driver is taken out of the GEO set when his offer
//     lock is taken, so he is counted once; his position is the last one in his driver hash;
//   - drivers to pickup / on trip: the drivers of the ACCEPTED / IN_PROGRESS rides, positioned by
//     their ride's live position (ridepos:{ride});
//   - open rides by status: rides REQUESTED, ACCEPTED, IN_PROGRESS (the predicate of the partial
//     index rides_one_open_per_rider), newest first in the list;
//   - match rate: of the rides created in the last MetricsWindow, the share accepted by a driver
//     (a scan of those rows: rides has no index on created_at alone, so this costs one pass over
//     the rides table a second per process; fine for a city's day, worth an index beyond).
//
// Paused and offline drivers are not shown: Redis indexes no such set, and finding them would mean
// scanning every driver hash. The PostgreSQL figures are read in one REPEATABLE READ transaction, so
// the ride counts and the ride list agree; the Redis figures are read right after it.
package opsview

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// MaxPoints caps each position list of a Snapshot (available drivers, open rides, offers): the
// counts stay exact, the lists say when they were cut (DriversCapped, RidesCapped, OffersCapped).
const MaxPoints = 3000

// MetricsWindow is the window of the match rate: rides created in the last 10 minutes.
const MetricsWindow = 10 * time.Minute

// Driver states on the map.
const (
	// DriverAvailable is a driver in the GEO set of available drivers.
	DriverAvailable = "available"
	// DriverOffered is a driver holding a live offer.
	DriverOffered = "offered"
	// DriverToPickup is the driver of an ACCEPTED ride, on his way to the pickup.
	DriverToPickup = "to_pickup"
	// DriverOnTrip is the driver of an IN_PROGRESS ride.
	DriverOnTrip = "on_trip"
)

// Point is a WGS84 position in degrees, lat before lng.
type Point struct {
	Lat float64 `json:"lat"`
	Lng float64 `json:"lng"`
}

func point(p dispatch.Point) Point { return Point{Lat: p.Lat, Lng: p.Lng} }

// Counts are the exact figures of a Snapshot.
type Counts struct {
	// Drivers is every driver in dispatch: DriversAvailable + DriversOffered + DriversToPickup +
	// DriversOnTrip.
	Drivers          int64 `json:"drivers"`
	DriversAvailable int64 `json:"drivers_available"`
	DriversOffered   int64 `json:"drivers_offered"`
	DriversToPickup  int64 `json:"drivers_to_pickup"`
	DriversOnTrip    int64 `json:"drivers_on_trip"`
	// RidesOpen is RidesRequested + RidesAccepted + RidesInProgress.
	RidesOpen       int64 `json:"rides_open"`
	RidesRequested  int64 `json:"rides_requested"`
	RidesAccepted   int64 `json:"rides_accepted"`
	RidesInProgress int64 `json:"rides_in_progress"`
	// OffersInFlight is the number of PENDING offers not past their expiry.
	OffersInFlight int64 `json:"offers_in_flight"`
}

// Metrics are the key figures beside the map.
type Metrics struct {
	// WindowS is the length of the window in seconds (MetricsWindow).
	WindowS float64 `json:"window_s"`
	// Requested is the number of rides created in the window; Matched of those, the ones a driver
	// accepted (whatever happened next); Unmatched the ones that found nobody in their retry budget.
	Requested int64 `json:"requested"`
	Matched   int64 `json:"matched"`
	Unmatched int64 `json:"unmatched"`
	// MatchRate is Matched / Requested (0 when none was requested).
	MatchRate float64 `json:"match_rate"`
	// WaitP50S is the median time from request to accept, seconds, of the matched rides of the
	// window (0 when none).
	WaitP50S float64 `json:"wait_p50_s"`
}

// DriverDot is one driver on the map.
type DriverDot struct {
	ID string `json:"id"`
	// State is DriverAvailable, DriverOffered, DriverToPickup or DriverOnTrip.
	State string `json:"state"`
	Point
}

// RideDot is one open ride on the map.
type RideDot struct {
	ID      string              `json:"id"`
	Status  dispatch.RideStatus `json:"status"`
	Pickup  Point               `json:"pickup"`
	Dropoff Point               `json:"dropoff"`
	// DriverID is the ride's driver (ACCEPTED, IN_PROGRESS), empty when none.
	DriverID string `json:"driver_id,omitempty"`
	// Driver is the driver's live position, when known.
	Driver    *Point    `json:"driver,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// OfferDot is one offer in flight: the line from the driver to the pickup.
type OfferDot struct {
	RideID   string `json:"ride_id"`
	DriverID string `json:"driver_id"`
	Pickup   Point  `json:"pickup"`
	// Driver is the driver's last position, when known.
	Driver *Point `json:"driver,omitempty"`
	// DistanceM is the straight-line distance driver→pickup in metres when offered.
	DistanceM float64   `json:"distance_m"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Snapshot is the state of the map at one moment.
type Snapshot struct {
	// Seq numbers the snapshots of one Hub (one process), from 1; 0 outside a Hub.
	Seq int64 `json:"seq"`
	// At is when the snapshot was read (this host's clock, UTC).
	At      time.Time `json:"at"`
	Counts  Counts    `json:"counts"`
	Metrics Metrics   `json:"metrics"`
	// Drivers are the available drivers (a random sample of at most MaxPoints when capped), the
	// offered drivers whose position is known, and the drivers of the listed rides whose live
	// position is known.
	Drivers []DriverDot `json:"drivers"`
	// Rides are the open rides, newest first, at most MaxPoints.
	Rides []RideDot `json:"rides"`
	// Offers are the offers in flight, oldest first, at most MaxPoints.
	Offers []OfferDot `json:"offers"`
	// DriversCapped, RidesCapped and OffersCapped say that a list holds fewer items than its count.
	DriversCapped bool `json:"drivers_capped"`
	RidesCapped   bool `json:"rides_capped"`
	OffersCapped  bool `json:"offers_capped"`
	// MaxPoints is the cap of each list.
	MaxPoints int `json:"max_points"`
}

// Reader builds snapshots and timelines over one process's pools.
type Reader struct {
	DB    *pgstore.DB
	Redis *redisstore.Store
	// MaxPoints caps each list; New sets MaxPoints.
	MaxPoints int
}

// New returns a Reader over db and rdb.
func New(db *pgstore.DB, rdb *redisstore.Store) *Reader {
	return &Reader{DB: db, Redis: rdb, MaxPoints: MaxPoints}
}

const openStatuses = `('REQUESTED','ACCEPTED','IN_PROGRESS')`

// Snapshot reads the current state (see the package comment for where each figure comes from).
// Errors are CodeUnavailable when a store cannot be reached.
func (rd *Reader) Snapshot(ctx context.Context) (*Snapshot, error) {
	s := &Snapshot{Drivers: []DriverDot{}, Rides: []RideDot{}, Offers: []OfferDot{}, MaxPoints: rd.MaxPoints}
	if err := rd.readPG(ctx, s); err != nil {
		return nil, err
	}
	s.At = time.Now().UTC()
	total, hits, err := rd.Redis.SampleAvailable(ctx, rd.MaxPoints)
	if err != nil {
		return nil, err
	}
	s.Counts.DriversAvailable = total
	s.DriversCapped = int64(len(hits)) < total
	for _, h := range hits {
		s.Drivers = append(s.Drivers, DriverDot{ID: h.DriverID, State: DriverAvailable, Point: point(h.Position)})
	}
	ids := make([]string, len(s.Offers))
	for i, o := range s.Offers {
		ids[i] = o.DriverID
	}
	pos, err := rd.Redis.DriverPositions(ctx, ids)
	if err != nil {
		return nil, err
	}
	for i, p := range pos {
		if p != nil {
			s.Offers[i].Driver = &Point{Lat: p.Lat, Lng: p.Lng}
			s.Drivers = append(s.Drivers, DriverDot{ID: ids[i], State: DriverOffered, Point: point(*p)})
		}
	}
	var onRide []redisstore.RideDriverPosition
	var at []int
	for i, r := range s.Rides {
		if r.DriverID != "" {
			onRide = append(onRide, redisstore.RideDriverPosition{RideID: r.ID, DriverID: r.DriverID})
			at = append(at, i)
		}
	}
	rpos, err := rd.Redis.RidePositions(ctx, onRide)
	if err != nil {
		return nil, err
	}
	for k, p := range rpos {
		if p == nil {
			continue
		}
		r := &s.Rides[at[k]]
		r.Driver = &Point{Lat: p.Lat, Lng: p.Lng}
		state := DriverToPickup
		if r.Status == dispatch.RideInProgress {
			state = DriverOnTrip
		}
		s.Drivers = append(s.Drivers, DriverDot{ID: r.DriverID, State: state, Point: *r.Driver})
	}
	c := &s.Counts
	c.DriversOffered = c.OffersInFlight
	c.DriversToPickup, c.DriversOnTrip = c.RidesAccepted, c.RidesInProgress
	c.Drivers = c.DriversAvailable + c.DriversOffered + c.DriversToPickup + c.DriversOnTrip
	c.RidesOpen = c.RidesRequested + c.RidesAccepted + c.RidesInProgress
	s.DriversCapped = s.DriversCapped || s.RidesCapped || s.OffersCapped
	return s, nil
}

// readPG reads the PostgreSQL figures of s in one read-only REPEATABLE READ transaction.
func (rd *Reader) readPG(ctx context.Context, s *Snapshot) (err error) {
	tx, err := rd.DB.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return dispatch.Unavailable("postgres", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	wrap := func(what string, err error) error {
		return dispatch.Unavailable("postgres", fmt.Errorf("opsview: %s: %w", what, err))
	}

	rows, err := tx.Query(ctx, `SELECT status, count(*) FROM rides WHERE status IN `+openStatuses+` GROUP BY status`)
	if err != nil {
		return wrap("ride counts", err)
	}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return wrap("ride counts", err)
		}
		switch dispatch.RideStatus(st) {
		case dispatch.RideRequested:
			s.Counts.RidesRequested = n
		case dispatch.RideAccepted:
			s.Counts.RidesAccepted = n
		case dispatch.RideInProgress:
			s.Counts.RidesInProgress = n
		}
	}
	if err := rows.Err(); err != nil {
		return wrap("ride counts", err)
	}

	rows, err = tx.Query(ctx, `SELECT id, status, pickup_lat, pickup_lng, dropoff_lat, dropoff_lng, coalesce(driver_id, ''), created_at
		FROM rides WHERE status IN `+openStatuses+` ORDER BY created_at DESC, id LIMIT $1`, rd.MaxPoints)
	if err != nil {
		return wrap("open rides", err)
	}
	for rows.Next() {
		var r RideDot
		if err := rows.Scan(&r.ID, &r.Status, &r.Pickup.Lat, &r.Pickup.Lng, &r.Dropoff.Lat, &r.Dropoff.Lng, &r.DriverID, &r.CreatedAt); err != nil {
			return wrap("open rides", err)
		}
		r.CreatedAt = r.CreatedAt.UTC()
		s.Rides = append(s.Rides, r)
	}
	if err := rows.Err(); err != nil {
		return wrap("open rides", err)
	}
	s.RidesCapped = int64(len(s.Rides)) < s.Counts.RidesRequested+s.Counts.RidesAccepted+s.Counts.RidesInProgress

	if err := tx.QueryRow(ctx, `SELECT count(*) FROM offers WHERE status = 'PENDING' AND expires_at > now()`).Scan(&s.Counts.OffersInFlight); err != nil {
		return wrap("offer count", err)
	}
	rows, err = tx.Query(ctx, `SELECT o.ride_id, o.driver_id, r.pickup_lat, r.pickup_lng, o.distance_m, o.expires_at
		FROM offers o JOIN rides r ON r.id = o.ride_id
		WHERE o.status = 'PENDING' AND o.expires_at > now() ORDER BY o.created_at, o.id LIMIT $1`, rd.MaxPoints)
	if err != nil {
		return wrap("offers", err)
	}
	for rows.Next() {
		var o OfferDot
		if err := rows.Scan(&o.RideID, &o.DriverID, &o.Pickup.Lat, &o.Pickup.Lng, &o.DistanceM, &o.ExpiresAt); err != nil {
			return wrap("offers", err)
		}
		o.ExpiresAt = o.ExpiresAt.UTC()
		s.Offers = append(s.Offers, o)
	}
	if err := rows.Err(); err != nil {
		return wrap("offers", err)
	}
	s.OffersCapped = int64(len(s.Offers)) < s.Counts.OffersInFlight

	m := &s.Metrics
	m.WindowS = MetricsWindow.Seconds()
	err = tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE accepted_at IS NOT NULL), count(*) FILTER (WHERE status = 'UNMATCHED'),
		coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM accepted_at - created_at)), 0)::float8
		FROM rides WHERE created_at > now() - make_interval(secs => $1)`, MetricsWindow.Seconds()).
		Scan(&m.Requested, &m.Matched, &m.Unmatched, &m.WaitP50S)
	if err != nil {
		return wrap("metrics", err)
	}
	if m.Requested > 0 {
		m.MatchRate = float64(m.Matched) / float64(m.Requested)
	}
	return nil
}
