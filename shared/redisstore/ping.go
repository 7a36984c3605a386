package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// GPSNoiseM is the distance in metres always allowed between two pings on top of
// MaxSpeedMPS × elapsed time, so GPS jitter between close pings is not taken for a jump.
const GPSNoiseM = 50

// Ping is one validated driver location update.
type Ping struct {
	DriverID string
	// Position is where the driver is, WGS84 degrees.
	Position dispatch.Point
	// At is when the device took the fix.
	At time.Time
	// Status is the status the driver's app asks for; empty keeps the current one.
	Status dispatch.DriverStatus
	// HeadingDeg is the heading in degrees clockwise from north (0..360); nil when unknown.
	HeadingDeg *float64
	// SpeedMPS is the device-reported speed, metres per second; nil when unknown.
	SpeedMPS *float64
}

// PingResult is what one ping did.
type PingResult struct {
	// Applied is true when the ping became the driver's position.
	Applied bool
	// Rejected is "stale" or "gps_jump" when Applied is false.
	Rejected string
	// Status is the driver's status after the ping.
	Status dispatch.DriverStatus
	// Offer is the driver's live offer, nil when none.
	Offer *dispatch.LiveOffer
	// PushRide is the ride whose rider is due a push of this position (Store.PositionPushInterval
	// passed since the last one of that ride), empty otherwise.
	PushRide string
}

// pingScript applies one ping atomically (one round trip per call, pipelined for batches).
// KEYS: driver hash, heartbeat, GEO set, offer lock, deadlines, on-ride set. ARGV: driver id, lat,
// lng, ts ms, status ("" keeps), heading, speed, heartbeat TTL ms, max speed m/s, noise m, ride-pos
// key prefix, ride-pos TTL ms, driver-state TTL ms, position push interval ms (0 = none). The one key
// not in KEYS is the live position of the driver's ride, P ridepos:{ride}: its name is the ride the
// driver hash holds, known only inside the script; it carries the prefix's hash tag, so on a Redis
// Cluster it is in the slot of the declared keys (CheckPrefix). The heartbeat's deadline is Redis's clock
// + TTL. A driver whose hash holds a ride is (re-)added to the on-ride set, so reconcile finds every
// such driver even if the set was lost or predates him.
// Rules: a ping not newer than the last accepted one is stale: it still proves the driver alive
// (heartbeat refreshed) but changes nothing else; a ping implying a speed above the maximum is a
// GPS jump: it refreshes the heartbeat but not the position. Drivers on a ride keep the status
// flagdown gave them, and only the driver a ride's live position was handed to (field driver, see
// ApplyAssignment) writes it. Only available drivers with no ride and no live offer are members of
// the GEO set. The driver hash expires driver-state TTL after the last ping. A ride position written
// at least the push interval after the last one marked due (field pushed, Redis's clock) is marked
// due again and its ride returned, so its rider gets at most one position push per interval.
var pingScript = redis.NewScript(redisNowMs + `
local cur = redis.call('HMGET', KEYS[1], 'ts', 'lat', 'lng', 'status', 'ride')
local ts = tonumber(ARGV[4])
local lastTs = tonumber(cur[1])
local status = cur[4] or 'offline'
local ride = cur[5] or ''
local offer = redis.call('GET', KEYS[4])
local hbdl = now + tonumber(ARGV[8])
redis.call('SET', KEYS[2], ARGV[4], 'PXAT', hbdl)
redis.call('ZADD', KEYS[5], hbdl, KEYS[2])
if lastTs and ts <= lastTs then
  redis.call('HSET', KEYS[1], 'hbdl', hbdl)
  redis.call('PEXPIRE', KEYS[1], ARGV[13])
  return {0, 'stale', status, offer or '', ''}
end
local lat, lng = tonumber(ARGV[2]), tonumber(ARGV[3])
local applied, rejected = 1, ''
local plat, plng = tonumber(cur[2]), tonumber(cur[3])
if plat and plng and lastTs then
  local r = math.pi / 180
  local dlat, dlng = (lat - plat) * r, (lng - plng) * r
  local a = math.sin(dlat/2)^2 + math.cos(plat*r) * math.cos(lat*r) * math.sin(dlng/2)^2
  local d = 2 * 6372797.560856 * math.asin(math.min(1, math.sqrt(a)))
  local dt = (ts - lastTs) / 1000
  if d > tonumber(ARGV[9]) * dt + tonumber(ARGV[10]) then
    applied, rejected = 0, 'gps_jump'
  end
end
local prev = status
if ride == '' and ARGV[5] ~= '' then status = ARGV[5] end
if ride ~= '' and (status == 'available' or status == 'offline' or status == 'paused') then
  status = redis.call('HGET', KEYS[1], 'resume') or 'navigating'
end
local fields = {'status', status, 'seen', ARGV[4], 'hbdl', hbdl}
if applied == 1 then
  table.insert(fields, 'ts'); table.insert(fields, ARGV[4])
  table.insert(fields, 'lat'); table.insert(fields, ARGV[2])
  table.insert(fields, 'lng'); table.insert(fields, ARGV[3])
  if ARGV[6] ~= '' then table.insert(fields, 'heading'); table.insert(fields, ARGV[6]) end
  if ARGV[7] ~= '' then table.insert(fields, 'speed'); table.insert(fields, ARGV[7]) end
else
  lat, lng = plat, plng
end
if status == 'available' and prev ~= 'available' then
  table.insert(fields, 'since'); table.insert(fields, now)
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], ARGV[13])
if status == 'available' and ride == '' and not offer and lat and lng then
  redis.call('GEOADD', KEYS[3], lng, lat, ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
if ride ~= '' then redis.call('SADD', KEYS[6], ARGV[1]) end
local push = ''
if ride ~= '' and applied == 1 then
  local rk = ARGV[11] .. ride
  local rp = redis.call('HMGET', rk, 'driver', 'pushed')
  if rp[1] == ARGV[1] then
    local every = tonumber(ARGV[14])
    if every > 0 and now - tonumber(rp[2] or '0') >= every then
      redis.call('HSET', rk, 'lat', ARGV[2], 'lng', ARGV[3], 'ts', ARGV[4], 'pushed', now)
      push = ride
    else
      redis.call('HSET', rk, 'lat', ARGV[2], 'lng', ARGV[3], 'ts', ARGV[4])
    end
    redis.call('PEXPIRE', rk, ARGV[12])
  end
end
return {applied, rejected, status, offer or '', push}
`)

// ApplyPings applies pings in one round trip (a pipeline of script calls) and returns one result
// per ping, in order. It returns a CodeUnavailable error if Redis cannot be reached.
func (s *Store) ApplyPings(ctx context.Context, pings []Ping) ([]PingResult, error) {
	run := func() ([]redis.Cmder, error) {
		pipe := s.rdb.Pipeline()
		for _, p := range pings {
			pingScript.EvalSha(ctx, pipe, s.pingKeys(p.DriverID), s.pingArgs(p)...)
		}
		return pipe.Exec(ctx)
	}
	cmds, err := run()
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		if err := pingScript.Load(ctx, s.rdb).Err(); err != nil {
			return nil, unavailable(err)
		}
		cmds, err = run()
	}
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([]PingResult, len(cmds))
	for i, c := range cmds {
		vals, err := c.(*redis.Cmd).Slice()
		if err != nil || len(vals) != 5 {
			return nil, dispatch.Internal(err)
		}
		applied, _ := vals[0].(int64)
		out[i] = PingResult{
			Applied:  applied == 1,
			Rejected: str(vals[1]),
			Status:   dispatch.DriverStatus(str(vals[2])),
			PushRide: str(vals[4]),
		}
		if v := str(vals[3]); v != "" {
			if out[i].Offer, err = decodeOffer(v); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func (s *Store) pingKeys(driverID string) []string {
	return []string{s.driverKey(driverID), s.hbKey(driverID), s.geoKey(), s.offerKey(driverID), s.DeadlinesKey(), s.onRideKey()}
}

func (s *Store) pingArgs(p Ping) []any {
	opt := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'f', -1, 64)
	}
	return []any{
		p.DriverID,
		strconv.FormatFloat(p.Position.Lat, 'f', -1, 64),
		strconv.FormatFloat(p.Position.Lng, 'f', -1, 64),
		ms(p.At),
		string(p.Status),
		opt(p.HeadingDeg),
		opt(p.SpeedMPS),
		s.HeartbeatTTL.Milliseconds(),
		strconv.FormatFloat(s.MaxSpeedMPS, 'f', -1, 64),
		GPSNoiseM,
		s.prefix + "ridepos:",
		s.RidePosTTL.Milliseconds(),
		s.DriverStateTTL.Milliseconds(),
		s.PositionPushInterval.Milliseconds(),
	}
}
