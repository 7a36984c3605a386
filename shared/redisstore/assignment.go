package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// redisNowMs is the Lua prelude every script that stamps or schedules uses: Redis's own clock in
// unix milliseconds, so no host clock (which may be off by seconds) reaches a deadline.
const redisNowMs = `local __t = redis.call('TIME')
local now = tonumber(__t[1]) * 1000 + math.floor(tonumber(__t[2]) / 1000)
`

// assignScript applies a driver's assignment from PostgreSQL compare-and-set on its epoch: it does
// nothing unless ARGV epoch is newer than the epoch the driver hash holds, so a late, repeated or
// snapshot-based write never moves Redis backwards. Whatever the epoch, a driver whose hash holds a
// ride is taken out of the available set (a driver on a ride is never offered another), and at the
// same epoch and ride an alive driver shown available or paused gets his on-ride status back.
//
// On a ride: ride and epoch set, status navigating/busy (offline with resume set while his heartbeat
// is gone), out of the GEO set, member of the on-ride set; the ride's live position is handed to
// him if the ride version is newer than the position's (starting at his last position, or none when
// Redis has none, never the previous driver's). Free: ride cleared, available since now
// (offline while his heartbeat is gone), optionally moved to ARGV lat/lng, back in the GEO set when
// alive and holding no offer lock. The live position of the ride he leaves is tombstoned
// (driver ”) if it was his.
//
// KEYS: driver hash, GEO, on-ride set, heartbeat, offer lock, and the live position of ARGV ride
// (only when it is not ”). ARGV: driver id, epoch, ride id (” = free), on-ride status, ride
// version, lat (” keeps), lng, ride-pos key prefix, ride-pos TTL ms, driver-state TTL ms. The one
// key not in KEYS is the live position of the ride the driver leaves (its name is the ride the hash
// holds, known only inside the script), built from the prefix: it carries the prefix's hash tag, so
// on a Redis Cluster it is in the slot of the declared keys (CheckPrefix). Returns 1 applied, 2 only
// taken out of the GEO set, 0 nothing to do.
var assignScript = redis.NewScript(redisNowMs + `
local e = tonumber(ARGV[2])
local cur = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
if e <= cur then
  local r = redis.call('HGET', KEYS[1], 'ride')
  local fixed = 0
  if r and r ~= '' then
    if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then fixed = 2 end
    local st = redis.call('HGET', KEYS[1], 'status')
    if e == cur and r == ARGV[3] and (st == 'available' or st == 'paused') and redis.call('EXISTS', KEYS[4]) == 1 then
      redis.call('HSET', KEYS[1], 'status', ARGV[4])
      fixed = 2
    end
  end
  return fixed
end
local old = redis.call('HGET', KEYS[1], 'ride') or ''
local st = redis.call('HGET', KEYS[1], 'status') or 'offline'
local alive = redis.call('EXISTS', KEYS[4]) == 1
local ride, ver = ARGV[3], tonumber(ARGV[5])
if old ~= '' and old ~= ride then
  local ok = ARGV[8] .. old
  if redis.call('HGET', ok, 'driver') == ARGV[1] then
    local ov = tonumber(redis.call('HGET', ok, 'ver') or '0')
    if ride == '' and ver > ov then ov = ver end
    redis.call('HSET', ok, 'driver', '', 'ver', ov)
    redis.call('PEXPIRE', ok, ARGV[9])
  end
end
redis.call('HSET', KEYS[1], 'epoch', ARGV[2], 'ride', ride)
if ride ~= '' then
  if alive then
    redis.call('HSET', KEYS[1], 'status', ARGV[4])
    redis.call('HDEL', KEYS[1], 'resume')
  else
    redis.call('HSET', KEYS[1], 'status', 'offline', 'resume', ARGV[4])
  end
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('SADD', KEYS[3], ARGV[1])
  local rk = KEYS[6]
  if ver > tonumber(redis.call('HGET', rk, 'ver') or '0') then
    redis.call('HSET', rk, 'driver', ARGV[1], 'ver', ver)
    local p = redis.call('HMGET', KEYS[1], 'lat', 'lng', 'ts')
    if p[1] and p[2] and p[3] then redis.call('HSET', rk, 'lat', p[1], 'lng', p[2], 'ts', p[3])
    else redis.call('HDEL', rk, 'lat', 'lng', 'ts') end
    redis.call('PEXPIRE', rk, ARGV[9])
  end
else
  redis.call('SREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[1], 'resume')
  if not alive then
    redis.call('HSET', KEYS[1], 'status', 'offline')
  elseif old ~= '' or st == 'navigating' or st == 'busy' then
    redis.call('HSET', KEYS[1], 'status', 'available', 'since', now)
    st = 'available'
  end
  if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'lat', ARGV[6], 'lng', ARGV[7]) end
  local p = redis.call('HMGET', KEYS[1], 'lat', 'lng', 'status')
  if alive and p[3] == 'available' and p[1] and p[2] and redis.call('EXISTS', KEYS[5]) == 0 then
    redis.call('GEOADD', KEYS[2], p[2], p[1], ARGV[1])
  end
end
if redis.call('PTTL', KEYS[1]) == -1 then redis.call('PEXPIRE', KEYS[1], ARGV[10]) end
return 1
`)

// ApplyResult says what applying one assignment did.
type ApplyResult int

// Results of ApplyAssignment.
const (
	// AssignNoop: Redis already held this epoch or a newer one, and nothing needed fixing.
	AssignNoop ApplyResult = 0
	// AssignApplied: the assignment was newer than Redis's and is now what Redis holds.
	AssignApplied ApplyResult = 1
	// AssignGeoFixed: Redis held the epoch already, but the driver, who is on a ride, was in the
	// available set or shown available; he was taken out of it and given his on-ride status.
	AssignGeoFixed ApplyResult = 2
)

func (s *Store) assignKeys(a dispatch.Assignment) []string {
	keys := []string{s.driverKey(a.DriverID), s.geoKey(), s.onRideKey(), s.hbKey(a.DriverID), s.offerKey(a.DriverID)}
	if a.RideID != "" {
		keys = append(keys, s.ridePosKey(a.RideID))
	}
	return keys
}

func (s *Store) assignArgs(a dispatch.Assignment) []any {
	lat, lng := "", ""
	if a.At != nil && a.RideID == "" {
		lat = strconv.FormatFloat(a.At.Lat, 'f', -1, 64)
		lng = strconv.FormatFloat(a.At.Lng, 'f', -1, 64)
	}
	return []any{a.DriverID, a.Epoch, a.RideID, string(dispatch.DriverStatusOnRide(a.RideStatus)), a.RideVersion,
		lat, lng, s.prefix + "ridepos:", s.RidePosTTL.Milliseconds(), s.DriverStateTTL.Milliseconds()}
}

// ApplyAssignment makes Redis hold a (see assignScript) unless it already holds a's epoch or a newer
// one. It returns what it did, or a CodeUnavailable error when Redis cannot be reached.
func (s *Store) ApplyAssignment(ctx context.Context, a dispatch.Assignment) (ApplyResult, error) {
	n, err := assignScript.Run(ctx, s.rdb, s.assignKeys(a), s.assignArgs(a)...).Int()
	if err != nil {
		return AssignNoop, unavailable(err)
	}
	return ApplyResult(n), nil
}

// releaseScript is compare-and-delete on the offer id inside the lock's JSON value, so nobody frees
// another offer's lock. When ARGV[2] is "1" and the driver is still available, without a ride and
// alive, he goes back to the GEO set. KEYS: lock, driver hash, heartbeat, GEO, deadlines. ARGV:
// offer id, requeue flag, driver id. Returns 1 when the lock was released.
var releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local ok, o = pcall(cjson.decode, v)
if not ok or type(o) ~= 'table' or o['offer_id'] ~= ARGV[1] then return 0 end
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

// ReleaseOffer deletes driverID's offer lock if it still holds offerID and, when requeue is true,
// puts a still-available, alive driver without a ride back in the GEO set. It reports whether the
// lock was released; errors are CodeUnavailable.
func (s *Store) ReleaseOffer(ctx context.Context, driverID, offerID string, requeue bool) (bool, error) {
	flag := "0"
	if requeue {
		flag = "1"
	}
	n, err := releaseScript.Run(ctx, s.rdb,
		[]string{s.offerKey(driverID), s.driverKey(driverID), s.hbKey(driverID), s.geoKey(), s.DeadlinesKey()},
		offerID, flag, driverID).Int()
	if err != nil {
		return false, unavailable(err)
	}
	return n == 1, nil
}

// ApplyReport counts what Apply did.
type ApplyReport struct {
	// Applied counts assignments Redis did not hold yet; Stale those it held already (or newer).
	Applied, Stale int
}

// Apply makes Redis follow a committed PostgreSQL change: assignments (compare-and-set on their
// epochs) first, then offer-lock releases, timers, missed offers and offline marks. It applies every
// effect it can and returns the first error (CodeUnavailable); what failed is left to reconcile,
// which re-derives it from PostgreSQL.
func (s *Store) Apply(ctx context.Context, fx dispatch.Effects) (ApplyReport, error) {
	var rep ApplyReport
	var errs []error
	for _, a := range fx.Assignments {
		res, err := s.ApplyAssignment(ctx, a)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("assignment of driver %s (epoch %d): %w", a.DriverID, a.Epoch, err))
		case res == AssignApplied:
			rep.Applied++
		default:
			rep.Stale++
		}
	}
	for _, r := range fx.ReleaseOffers {
		if _, err := s.ReleaseOffer(ctx, r.DriverID, r.OfferID, r.Requeue); err != nil {
			errs = append(errs, fmt.Errorf("release offer %s of driver %s: %w", r.OfferID, r.DriverID, err))
		}
	}
	for _, id := range fx.ClearRetryTimers {
		if err := s.ClearRetryTimer(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("clear retry timer of ride %s: %w", id, err))
		}
	}
	for _, t := range fx.RetryTimers {
		if err := s.SetRetryTimer(ctx, t.RideID, strconv.Itoa(t.Attempt), t.Wait); err != nil {
			errs = append(errs, fmt.Errorf("arm retry timer of ride %s: %w", t.RideID, err))
		}
	}
	if len(fx.BatchJoins) > 0 {
		if _, err := s.JoinBatch(ctx, CityBatch, fx.BatchJoins, s.BatchWindow); err != nil {
			errs = append(errs, fmt.Errorf("re-join %d rides to the batch: %w", len(fx.BatchJoins), err))
		}
	}
	for _, id := range fx.Misses {
		if err := s.RecordMiss(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("record missed offer of driver %s: %w", id, err))
		}
	}
	for _, id := range fx.Offline {
		if _, _, err := s.MarkOffline(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("mark driver %s offline: %w", id, err))
		}
	}
	for _, d := range fx.MatchDelaysS {
		if err := s.RecordMatchDelay(ctx, d); err != nil {
			errs = append(errs, fmt.Errorf("record match delay: %w", err))
		}
	}
	for _, w := range fx.WaitErrors {
		if err := s.RecordWaitError(ctx, w.Pickup, w.RequestedAt, w.ErrS); err != nil {
			errs = append(errs, fmt.Errorf("record wait error: %w", err))
		}
	}
	if len(errs) > 0 {
		return rep, dispatch.Unavailable("redis", errors.Join(errs...))
	}
	return rep, nil
}

// AssignmentState is what Redis holds of a driver's assignment (reconcile and verify compare it
// with PostgreSQL).
type AssignmentState struct {
	// Exists is false when Redis holds no hash for the driver.
	Exists bool
	Status dispatch.DriverStatus
	// RideID is the driver's ride in Redis, empty when none.
	RideID string
	// Epoch is the last assignment epoch applied, 0 when none.
	Epoch int64
	// InAvailable reports membership of the available GEO set.
	InAvailable bool
	// Alive reports whether the heartbeat key exists.
	Alive bool
}

// AssignmentStates reads the assignment state of each driver in one pipelined round trip.
func (s *Store) AssignmentStates(ctx context.Context, ids []string) ([]AssignmentState, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	hs := make([]*redis.SliceCmd, len(ids))
	geo := make([]*redis.FloatCmd, len(ids))
	hb := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		hs[i] = pipe.HMGet(ctx, s.driverKey(id), "status", "ride", "epoch")
		geo[i] = pipe.ZScore(ctx, s.geoKey(), id)
		hb[i] = pipe.Exists(ctx, s.hbKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, unavailable(err)
	}
	out := make([]AssignmentState, len(ids))
	for i := range ids {
		v := hs[i].Val()
		out[i] = AssignmentState{
			Exists: v[0] != nil || v[1] != nil || v[2] != nil,
			Status: dispatch.DriverStatus(str(v[0])), RideID: str(v[1]), Epoch: atoi64(str(v[2])),
			InAvailable: geo[i].Err() == nil, Alive: hb[i].Val() == 1,
		}
	}
	return out, nil
}

// OnRideDrivers returns the drivers Redis shows on a ride (members of the on-ride set).
func (s *Store) OnRideDrivers(ctx context.Context) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, s.onRideKey()).Result()
	return ids, unavailable(err)
}

// RidePositionDriver returns the driver whose live position ride rideID shows ("" when none or a
// tombstone).
func (s *Store) RidePositionDriver(ctx context.Context, rideID string) (string, error) {
	v, err := s.rdb.HGet(ctx, s.ridePosKey(rideID), "driver").Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, unavailable(err)
}
