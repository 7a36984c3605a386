package redisstore

import (
	"context"
	"errors"
	"strconv"
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

// Nearby returns up to count available drivers within radiusM metres of p, nearest first
// (GEOSEARCH FROMLONLAT BYRADIUS ASC COUNT: cost grows with count, not with fleet size).
func (s *Store) Nearby(ctx context.Context, p dispatch.Point, radiusM float64, count int) ([]GeoHit, error) {
	locs, err := s.rdb.GeoSearchLocation(ctx, s.geoKey(), &redis.GeoSearchLocationQuery{
		GeoSearchQuery: redis.GeoSearchQuery{
			Longitude: p.Lng, Latitude: p.Lat, Radius: radiusM, RadiusUnit: "m", Sort: "ASC", Count: count,
		},
		WithCoord: true, WithDist: true,
	}).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	hits := make([]GeoHit, len(locs))
	for i, l := range locs {
		hits[i] = GeoHit{DriverID: l.Name, DistanceM: l.Dist, Position: dispatch.Point{Lat: l.Latitude, Lng: l.Longitude}}
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

// lockScript takes a driver's offer lock (SET NX PX) and, only if it got it, takes him out of the
// GEO set so concurrent searches stop finding him, and indexes the lock's deadline.
// KEYS: lock, GEO, deadlines. ARGV: value, TTL ms, driver id, deadline ms.
var lockScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('ZREM', KEYS[2], ARGV[3])
  redis.call('ZADD', KEYS[3], ARGV[4], KEYS[1])
  return 1
end
return 0
`)

// LockOffer takes driverID's offer lock with value (the offer JSON) for ttl. It returns false if
// another offer holds him. Only the holder of value may release it (ReleaseOffer).
func (s *Store) LockOffer(ctx context.Context, driverID, value string, ttl time.Duration) (bool, error) {
	n, err := lockScript.Run(ctx, s.rdb, []string{s.offerKey(driverID), s.geoKey(), s.DeadlinesKey()},
		value, ttl.Milliseconds(), driverID, time.Now().Add(ttl).UnixMilli()).Int()
	if err != nil {
		return false, unavailable(err)
	}
	return n == 1, nil
}

// releaseScript is compare-and-delete: the lock is deleted only if it still holds ARGV[1]. When
// ARGV[2] is "1" and the driver is still available with a heartbeat, he goes back to the GEO set.
// KEYS: lock, driver hash, heartbeat, GEO, deadlines. ARGV: value, requeue flag, driver id.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[5], KEYS[1])
if ARGV[2] == '1' and redis.call('EXISTS', KEYS[3]) == 1 then
  local st = redis.call('HMGET', KEYS[2], 'status', 'ride', 'lat', 'lng')
  if st[1] == 'available' and (st[2] == false or st[2] == '') and st[3] and st[4] then
    redis.call('GEOADD', KEYS[4], st[4], st[3], ARGV[3])
  end
end
return 1
`)

// ReleaseOffer deletes driverID's offer lock if it still holds value (compare-and-delete, so nobody
// frees another's lock) and, when requeue is true, puts a still-available, alive driver back in the
// GEO set. It reports whether the lock was released.
func (s *Store) ReleaseOffer(ctx context.Context, driverID, value string, requeue bool) (bool, error) {
	flag := "0"
	if requeue {
		flag = "1"
	}
	n, err := releaseScript.Run(ctx, s.rdb,
		[]string{s.offerKey(driverID), s.driverKey(driverID), s.hbKey(driverID), s.geoKey(), s.DeadlinesKey()},
		value, flag, driverID).Int()
	if err != nil {
		return false, unavailable(err)
	}
	return n == 1, nil
}

// OfferLock returns the value of driverID's live offer lock, or "" when none.
func (s *Store) OfferLock(ctx context.Context, driverID string) (string, error) {
	v, err := s.rdb.Get(ctx, s.offerKey(driverID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, unavailable(err)
}

// assignScript gives an accepting driver his ride: out of the GEO set, status navigating, ride
// set, then compare-and-delete of his offer lock. KEYS: driver hash, GEO, lock, ride position,
// deadlines. ARGV: driver id, ride id, lock value.
var assignScript = redis.NewScript(`
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'status', 'navigating', 'ride', ARGV[2])
redis.call('HDEL', KEYS[1], 'resume')
if redis.call('GET', KEYS[3]) == ARGV[3] then
  redis.call('DEL', KEYS[3])
  redis.call('ZREM', KEYS[5], KEYS[3])
end
local p = redis.call('HMGET', KEYS[1], 'lat', 'lng', 'ts')
if p[1] and p[2] and p[3] then redis.call('HSET', KEYS[4], 'lat', p[1], 'lng', p[2], 'ts', p[3]) end
return 1
`)

// AssignRide marks driverID as navigating to rideID's pickup and releases his offer lock lockValue.
func (s *Store) AssignRide(ctx context.Context, driverID, rideID, lockValue string) error {
	err := assignScript.Run(ctx, s.rdb,
		[]string{s.driverKey(driverID), s.geoKey(), s.offerKey(driverID), s.ridePosKey(rideID), s.DeadlinesKey()},
		driverID, rideID, lockValue).Err()
	return unavailable(err)
}

// SetOnRide sets the status of a driver whose ride started (busy).
func (s *Store) SetOnRide(ctx context.Context, driverID string) error {
	return unavailable(s.rdb.HSet(ctx, s.driverKey(driverID), "status", string(dispatch.DriverBusy)).Err())
}

// freeScript ends a driver's ride: status available since now, ride cleared, optionally moved to a
// new position, and back in the GEO set while his heartbeat lives. KEYS: driver hash, heartbeat,
// GEO, ride position. ARGV: driver id, now ms, lat ("" keeps), lng.
var freeScript = redis.NewScript(`
redis.call('HSET', KEYS[1], 'status', 'available', 'ride', '', 'since', ARGV[2])
redis.call('HDEL', KEYS[1], 'resume')
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'lat', ARGV[3], 'lng', ARGV[4]) end
redis.call('DEL', KEYS[4])
local p = redis.call('HMGET', KEYS[1], 'lat', 'lng')
if redis.call('EXISTS', KEYS[2]) == 1 and p[1] and p[2] then
  redis.call('GEOADD', KEYS[3], p[2], p[1], ARGV[1])
end
return 1
`)

// FreeDriver makes driverID available again after rideID ended, at position at when non-nil
// (the dropoff), and puts him back in the GEO set if his heartbeat is alive.
func (s *Store) FreeDriver(ctx context.Context, driverID, rideID string, at *dispatch.Point) error {
	lat, lng := "", ""
	if at != nil {
		lat = strconv.FormatFloat(at.Lat, 'f', -1, 64)
		lng = strconv.FormatFloat(at.Lng, 'f', -1, 64)
	}
	err := freeScript.Run(ctx, s.rdb,
		[]string{s.driverKey(driverID), s.hbKey(driverID), s.geoKey(), s.ridePosKey(rideID)},
		driverID, ms(time.Now()), lat, lng).Err()
	return unavailable(err)
}

// RidePosition is a live driver position for a ride.
type RidePosition struct {
	Lat float64   `json:"lat"`
	Lng float64   `json:"lng"`
	At  time.Time `json:"ts"`
}

// RidePosition returns the live driver position of rideID, or nil when none is known.
func (s *Store) RidePosition(ctx context.Context, rideID string) (*RidePosition, error) {
	v, err := s.rdb.HMGet(ctx, s.ridePosKey(rideID), "lat", "lng", "ts").Result()
	if err != nil {
		return nil, unavailable(err)
	}
	if v[0] == nil || v[1] == nil || v[2] == nil {
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
