package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// GeoHit is a driver found by a GEO search.
type GeoHit struct {
	DriverID string
	// DistanceM is the distance to the search centre in metres.
	DistanceM float64
	// Position is the driver's indexed position (Redis GEO precision, about 0.6 m).
	Position dispatch.Point
}

// RingStartM is the radius in metres of the first ring of a candidate search (see nearbyScript).
// The bench's 1M-driver fleet crowds up to about 0.5 drivers per m² at the busiest pickups, where 10
// drivers sit within 2–3 m; a sparse fleet needs a few more, cheap, rings.
const RingStartM = 2

// nearbyScript is the flat-cost candidate search in rings of growing radius (scripts/nearby.lua:
// why it is exact and flat).
var nearbyScript = loadScript("nearby.lua")

// Nearby returns up to count available drivers within radiusM metres of p (WGS84), nearest first,
// at a cost that stays flat with the fleet's density (nearbyScript: rings of growing radius, one
// round trip). Errors are CodeUnavailable.
func (s *Store) Nearby(ctx context.Context, p dispatch.Point, radiusM float64, count int) ([]GeoHit, error) {
	hits, err := s.NearbyMany(ctx, []NearbyQuery{{Center: p, RadiusM: radiusM, Count: count}})
	if err != nil {
		return nil, err
	}
	return hits[0], nil
}

// NearbyQuery is one search of NearbyMany: up to Count available drivers within RadiusM metres of
// Center.
type NearbyQuery struct {
	Center  dispatch.Point
	RadiusM float64
	Count   int
}

// NearbyMany runs Nearby for every query in one pipelined round trip (a batch window's candidate
// searches) and returns their hits in the order of qs. Errors are CodeUnavailable.
func (s *Store) NearbyMany(ctx context.Context, qs []NearbyQuery) ([][]GeoHit, error) {
	if len(qs) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	for _, q := range qs {
		nearbyScript.EvalSha(ctx, pipe, []string{s.geoKey()},
			strconv.FormatFloat(q.Center.Lng, 'f', -1, 64), strconv.FormatFloat(q.Center.Lat, 'f', -1, 64),
			strconv.FormatFloat(q.RadiusM, 'f', -1, 64), max(q.Count, 1), RingStartM)
	}
	cmds, err := ExecScripts(ctx, s.rdb, pipe, nearbyScript)
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([][]GeoHit, len(qs))
	for i, c := range cmds {
		if out[i], err = geoHits(c.(*redis.Cmd).Val()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// geoHits decodes nearbyScript's reply: {{name, dist, {lng, lat}}, …}, rings.
func geoHits(v any) ([]GeoHit, error) {
	top, ok := v.([]any)
	if !ok || len(top) != 2 {
		return nil, dispatch.Internal(fmt.Errorf("redisstore: nearby reply %T", v))
	}
	rows, _ := top[0].([]any)
	hits := make([]GeoHit, 0, len(rows))
	for _, r := range rows {
		f, ok := r.([]any)
		if !ok || len(f) != 3 {
			return nil, dispatch.Internal(fmt.Errorf("redisstore: nearby row %v", r))
		}
		xy, ok := f[2].([]any)
		if !ok || len(xy) != 2 {
			return nil, dispatch.Internal(fmt.Errorf("redisstore: nearby coordinates %v", f[2]))
		}
		hits = append(hits, GeoHit{DriverID: str(f[0]), DistanceM: f64(str(f[1])),
			Position: dispatch.Point{Lat: f64(str(xy[1])), Lng: f64(str(xy[0]))}})
	}
	return hits, nil
}

// DriverInfo is what matching needs to know of a candidate beyond his position.
type DriverInfo struct {
	// Alive is true while the driver's heartbeat key exists.
	Alive  bool
	Status dispatch.DriverStatus
	// RideID is the driver's active ride, empty when none.
	RideID string
	// Rating in stars (1..5), 0 when none is recorded.
	Rating float64
	// AvailableSince is when the driver last became available (zero when unknown).
	AvailableSince time.Time
	// Missed is how many offers the driver let expire, and MissedAt when the last one was.
	Missed   int
	MissedAt time.Time
}

// DriverInfos reads heartbeat (one MGET) and state of each driver in one round trip.
func (s *Store) DriverInfos(ctx context.Context, ids []string) ([]DriverInfo, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.hbKey(id)
	}
	pipe := s.rdb.Pipeline()
	mget := pipe.MGet(ctx, keys...)
	states := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		states[i] = pipe.HMGet(ctx, s.driverKey(id), "status", "ride", "rating", "since", "missed", "missed_at")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, unavailable(err)
	}
	out := make([]DriverInfo, len(ids))
	for i, hb := range mget.Val() {
		v := states[i].Val()
		out[i] = DriverInfo{Alive: hb != nil, Status: dispatch.DriverStatus(str(v[0])), RideID: str(v[1]), Rating: f64(str(v[2]))}
		if since, err := strconv.ParseInt(str(v[3]), 10, 64); err == nil {
			out[i].AvailableSince = time.UnixMilli(since)
		}
		if m := atoi64(str(v[4])); m > 0 {
			out[i].Missed, out[i].MissedAt = int(m), time.UnixMilli(atoi64(str(v[5])))
		}
	}
	return out, nil
}

// lockScript takes a driver's offer lock only if he can be offered a ride, checked in the same
// atomic step (scripts/lock_offer.lua).
var lockScript = loadScript(nowLua, availableLua, "lock_offer.lua")

// tentativeMark starts the value of an offer lock whose offer is not recorded yet (LockOffer until
// ConfirmOffer).
const tentativeMark = "~"

// LockOffer takes driverID's offer lock holding o for ttl (at least 1 ms), and arms the offer's own
// timer (P offertimer:{o.OfferID}) for the same deadline. It returns false if
// another offer holds him or he is no longer available, alive and free of a ride (re-checked
// atomically). The lock is tentative: it keeps every other offer away, but no ping answer or
// OfferLock shows it until ConfirmOffer, which match calls once the offer is recorded in
// PostgreSQL (a transaction that fails, or whose commit is lost, leaves an offer nobody saw).
// Only the holder of o.OfferID may release it (ReleaseOffer). Errors are CodeUnavailable.
func (s *Store) LockOffer(ctx context.Context, driverID string, o dispatch.LiveOffer, ttl time.Duration) (bool, error) {
	value, err := json.Marshal(o)
	if err != nil {
		return false, dispatch.Internal(err)
	}
	n, err := lockScript.Run(ctx, s.rdb,
		[]string{s.offerKey(driverID), s.geoKey(), s.DeadlinesKey(), s.driverKey(driverID), s.hbKey(driverID), s.offerTimerKey(o.OfferID)},
		tentativeMark+string(value), max(ttl.Milliseconds(), 1), driverID).Int()
	if err != nil {
		return false, unavailable(err)
	}
	return n == 1, nil
}

// confirmScript drops the tentative mark of an offer lock (scripts/confirm_offer.lua).
var confirmScript = loadScript("confirm_offer.lua")

// ConfirmOffer makes driverID's tentative offer lock of offerID an offer he is shown (ping answers,
// OfferLock), keeping its deadline. It reports false when the lock no longer holds that offer
// (it ended, or was released). Errors are CodeUnavailable.
func (s *Store) ConfirmOffer(ctx context.Context, driverID, offerID string) (bool, error) {
	n, err := confirmScript.Run(ctx, s.rdb, []string{s.offerKey(driverID)}, offerID).Int()
	if err != nil {
		return false, unavailable(err)
	}
	return n == 1, nil
}

// OfferLock returns driverID's live offer, or nil when he holds none or only a tentative one (not
// confirmed yet).
func (s *Store) OfferLock(ctx context.Context, driverID string) (*dispatch.LiveOffer, error) {
	v, err := s.rdb.Get(ctx, s.offerKey(driverID)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return decodeOffer(v)
}

// decodeOffer decodes an offer lock value: nil for a tentative one (not confirmed: not an offer
// anybody may be shown yet).
func decodeOffer(v string) (*dispatch.LiveOffer, error) {
	if strings.HasPrefix(v, tentativeMark) {
		return nil, nil
	}
	var o dispatch.LiveOffer
	if err := json.Unmarshal([]byte(v), &o); err != nil {
		return nil, dispatch.Internal(fmt.Errorf("redisstore: offer lock value: %w", err))
	}
	return &o, nil
}

// RidePosition is a live driver position for a ride.
type RidePosition struct {
	Lat float64   `json:"lat"`
	Lng float64   `json:"lng"`
	At  time.Time `json:"ts"`
}

// RidePosition returns the live position of rideID's driver driverID, or nil when none is known
// or the position Redis holds is not his (a driver who lost the ride never shows on it).
func (s *Store) RidePosition(ctx context.Context, rideID, driverID string) (*RidePosition, error) {
	v, err := s.rdb.HMGet(ctx, s.ridePosKey(rideID), "lat", "lng", "ts", "driver").Result()
	if err != nil {
		return nil, unavailable(err)
	}
	if v[0] == nil || v[1] == nil || v[2] == nil || driverID == "" || str(v[3]) != driverID {
		return nil, nil
	}
	t, _ := strconv.ParseInt(str(v[2]), 10, 64)
	return &RidePosition{Lat: f64(str(v[0])), Lng: f64(str(v[1])), At: time.UnixMilli(t).UTC()}, nil
}

// InAvailableSet reports whether driverID is a member of the available GEO set (tests, reconcile).
func (s *Store) InAvailableSet(ctx context.Context, driverID string) (bool, error) {
	pos, err := s.rdb.GeoPos(ctx, s.geoKey(), driverID).Result()
	if err != nil {
		return false, unavailable(err)
	}
	return len(pos) == 1 && pos[0] != nil, nil
}

// GeoPosition returns driverID's position in the available set (nil when absent).
func (s *Store) GeoPosition(ctx context.Context, driverID string) (*dispatch.Point, error) {
	pos, err := s.rdb.GeoPos(ctx, s.geoKey(), driverID).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	if len(pos) != 1 || pos[0] == nil {
		return nil, nil
	}
	return &dispatch.Point{Lat: pos[0].Latitude, Lng: pos[0].Longitude}, nil
}
