package redisstore

import (
	"context"
	"fmt"
	"strconv"
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
	// Rejected is "stale", "gps_jump" or "rate_limited" (RejectedRateLimited) when Applied is false.
	Rejected string
	// Status is the driver's status after the ping.
	Status dispatch.DriverStatus
	// Offer is the driver's live offer, nil when none.
	Offer *dispatch.LiveOffer
	// PushRide is the ride whose rider is due a push of this position (Store.PositionPushInterval
	// passed since the last one of that ride), empty otherwise.
	PushRide string
	// RetryAfter is how long the driver should wait before his next ping is within his budget
	// (Store.PingsPerMin) when Rejected is "rate_limited"; 0 otherwise.
	RetryAfter time.Duration
}

// RejectedRateLimited is PingResult.Rejected for a ping past its driver's budget (Store.PingsPerMin):
// it changed nothing, not even his heartbeat, and spent nothing.
const RejectedRateLimited = "rate_limited"

// pingScript applies a batch of pings, each atomically with its rate budget (scripts/ping.lua: its
// KEYS, ARGV and rules).
var pingScript = loadScript(nowLua, availableLua, gpsJumpLua, pingBudgetLua, "ping.lua")

// pingsPerCall is the most pings one script call applies: the call's own cost is paid once per
// this many pings, and Redis runs nothing else for the call's length (about 10 µs of Redis time
// per ping, so about 1 ms).
const pingsPerCall = 100

// driverStateRefresh is how stale the driver hash's expiry may grow before a ping renews it
// (Store.stateRefresh caps it): a steady driver's ping renews the expiry about once a minute, not
// every time.
const driverStateRefresh = time.Minute

// stateRefresh is how stale the driver hash's expiry may grow before a ping renews it:
// driverStateRefresh, or half of what DriverStateTTL leaves beyond HeartbeatTTL when that is less,
// so a hash lives at least DriverStateTTL - stateRefresh after the last ping, always longer than
// his heartbeat (liveness reads hbdl from the hash), and at most DriverStateTTL.
func (s *Store) stateRefresh() time.Duration {
	return max(0, min(driverStateRefresh, (s.DriverStateTTL-s.HeartbeatTTL)/2))
}

// ApplyPings applies pings in one round trip (a pipeline of script calls, up to pingsPerCall
// pings each) and returns one result per ping, in order. Each ping spends one unit of its
// driver's budget (PingsPerMin): a ping past it is rejected "rate_limited" and changes nothing;
// the pings of one call are judged in order, so a driver's later pings of a batch may be refused
// where his earlier ones passed. It returns a CodeUnavailable error if Redis cannot be reached.
func (s *Store) ApplyPings(ctx context.Context, pings []Ping) ([]PingResult, error) {
	pipe := s.rdb.Pipeline()
	for lo := 0; lo < len(pings); lo += pingsPerCall {
		keys, args := s.pingCall(pings[lo:min(lo+pingsPerCall, len(pings))])
		pingScript.EvalSha(ctx, pipe, keys, args...)
	}
	cmds, err := ExecScripts(ctx, s.rdb, pipe, pingScript)
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([]PingResult, 0, len(pings))
	for _, c := range cmds {
		replies, err := c.(*redis.Cmd).Slice()
		if err != nil {
			return nil, dispatch.Internal(err)
		}
		for _, r := range replies {
			vals, ok := r.([]any)
			if !ok || len(vals) != 6 {
				return nil, dispatch.Internal(fmt.Errorf("ping reply %v: want 6 values", r))
			}
			applied, _ := vals[0].(int64)
			retryMs, _ := vals[5].(int64)
			res := PingResult{
				Applied:    applied == 1,
				Rejected:   str(vals[1]),
				Status:     dispatch.DriverStatus(str(vals[2])),
				PushRide:   str(vals[4]),
				RetryAfter: time.Duration(retryMs) * time.Millisecond,
			}
			if v := str(vals[3]); v != "" {
				if res.Offer, err = decodeOffer(v); err != nil {
					return nil, err
				}
			}
			out = append(out, res)
		}
	}
	if len(out) != len(pings) {
		return nil, dispatch.Internal(fmt.Errorf("ping script answered %d pings of %d", len(out), len(pings)))
	}
	return out, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// pingCall returns the KEYS and ARGV of one script call applying pings (scripts/ping.lua).
func (s *Store) pingCall(pings []Ping) ([]string, []any) {
	opt := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'f', -1, 64)
	}
	keys := make([]string, 0, 4+3*len(pings))
	keys = append(keys, s.geoKey(), s.DeadlinesKey(), s.onRideKey(), s.hbIdxKey())
	args := make([]any, 0, 9+7*len(pings))
	args = append(args,
		s.HeartbeatTTL.Milliseconds(),
		strconv.FormatFloat(s.MaxSpeedMPS, 'f', -1, 64),
		GPSNoiseM,
		s.prefix+"ridepos:",
		s.RidePosTTL.Milliseconds(),
		s.DriverStateTTL.Milliseconds(),
		s.PositionPushInterval.Milliseconds(),
		s.PingsPerMin,
		s.stateRefresh().Milliseconds(),
	)
	for _, p := range pings {
		keys = append(keys, s.driverKey(p.DriverID), s.hbKey(p.DriverID), s.offerKey(p.DriverID))
		args = append(args,
			p.DriverID,
			strconv.FormatFloat(p.Position.Lat, 'f', -1, 64),
			strconv.FormatFloat(p.Position.Lng, 'f', -1, 64),
			ms(p.At),
			string(p.Status),
			opt(p.HeadingDeg),
			opt(p.SpeedMPS),
		)
	}
	return keys, args
}

// spendPingScript spends one unit of a driver's ping budget (scripts/spend_ping.lua).
var spendPingScript = loadScript(nowLua, pingBudgetLua, "spend_ping.lua")

// SpendPing spends one unit of driverID's ping budget (PingsPerMin, the budget ApplyPings spends)
// for something that reports where he is without being a ping (a driver's hail press). It returns
// 0 when spent, or how long to wait when the budget is spent (nothing is spent then). A driver
// Redis holds no state of has no budget yet: nothing is spent (and no hash created). Errors are
// CodeUnavailable.
func (s *Store) SpendPing(ctx context.Context, driverID string) (time.Duration, error) {
	if s.PingsPerMin <= 0 {
		return 0, nil
	}
	ms, err := spendPingScript.Run(ctx, s.rdb, []string{s.driverKey(driverID)}, s.PingsPerMin).Int64()
	if err != nil {
		return 0, unavailable(err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
