package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// GPSNoiseM is the distance in metres always allowed between two pings (and between a driver's
// last ping and his street-hail press) on top of MaxSpeedMPS × elapsed time, so GPS jitter between
// close fixes is not taken for a jump (scripts/gps_jump.lua).
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

// pingScript applies one ping atomically (scripts/ping.lua: its KEYS, ARGV and rules); one round
// trip per call, pipelined for batches.
var pingScript = loadScript(nowLua, availableLua, gpsJumpLua, "ping.lua")

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
