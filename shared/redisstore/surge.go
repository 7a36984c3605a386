package redisstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Surge and wait-estimate keys (see the package comment). Each script below touches one key, so
// every command stays on one slot of a Redis Cluster whatever the key names become.
func (s *Store) surgeDemandKey(cell string) string { return s.prefix + "surge:demand:" + cell }
func (s *Store) surgeMultKey(cell string) string   { return s.prefix + "surge:mult:" + cell }
func (s *Store) quoteKey(id string) string         { return s.prefix + "quote:" + id }
func (s *Store) matchDelayKey() string             { return s.prefix + "matchdelay" }
func (s *Store) drivePaceKey() string              { return s.prefix + "drivepace" }

// demandAddScript records one ride request in a cell's demand (scripts/demand_add.lua).
var demandAddScript = loadScript(nowLua, "demand_add.lua")

// demandCountScript counts a cell's requests within the window (scripts/demand_count.lua).
var demandCountScript = loadScript(nowLua, "demand_count.lua")

// CountDemand records the request of ride rideID from geohash cell cell in the cell's sliding
// window of length window (a sorted set of ride ids by Redis's time: a ride counted twice, by a
// retried call, counts once). One round trip.
func (s *Store) CountDemand(ctx context.Context, cell, rideID string, window time.Duration) error {
	return unavailable(demandAddScript.Run(ctx, s.rdb, []string{s.surgeDemandKey(cell)}, rideID, window.Milliseconds()).Err())
}

// CountDemandAndStoreSurge is CountDemand and, when store is true, StoreSurge(cell, m, prevAtMs,
// interval, ttl) in one pipelined round trip (each a script on its own key).
func (s *Store) CountDemandAndStoreSurge(ctx context.Context, cell, rideID string, window time.Duration, store bool, m float64, prevAtMs int64,
	interval, ttl time.Duration) error {
	pipe := s.rdb.Pipeline()
	demandAddScript.EvalSha(ctx, pipe, []string{s.surgeDemandKey(cell)}, rideID, window.Milliseconds())
	if store {
		surgeStoreScript.EvalSha(ctx, pipe, []string{s.surgeMultKey(cell)},
			strconv.FormatFloat(m, 'f', -1, 64), prevAtMs, interval.Milliseconds(), ttl.Milliseconds())
	}
	_, err := ExecScripts(ctx, s.rdb, pipe, demandAddScript, surgeStoreScript)
	return unavailable(err)
}

// SurgeRead is what ReadSurge saw of a cell and of the supply near a pickup.
type SurgeRead struct {
	// Load is the cell's demand (requests in the window) and supply (drivers of the available GEO
	// set inside the cell's box, at most the supply bound of ReadSurge).
	Load dispatch.CellLoad
	// Prev is the cell's stored multiplier and PrevAtMs when it was stored (ms, Redis's clock); both
	// 0 when none is stored (never computed, or expired: missing data).
	Prev     float64
	PrevAtMs int64
	// NowMs is Redis's clock when the demand was counted, ms.
	NowMs int64
	// NearestM is the straight-line distance in metres from the pickup to the nearest driver of the
	// available GEO set within the search radius, -1 when there is none.
	NearestM float64
	// MatchDelayS is the recent match delay (RecordMatchDelay), seconds; 0 before any accept.
	MatchDelayS float64
	// WaitCalibrationS is the wait calibration of the pickup's cell (or the city's) at this hour
	// of day (RecordWaitError), seconds; 0 without data.
	WaitCalibrationS float64
	// DrivePace is the drive pace learned from pickups (RecordDriveSample); zero before any.
	DrivePace dispatch.DrivePace
}

// ReadSurge reads, in one pipelined round trip: the demand of cell within window, the available
// drivers inside box (GEOSEARCH BYBOX COUNT supplyBound), the cell's stored multiplier, the
// nearest available driver within nearRadiusM metres of pickup, the recent match delay and the wait
// calibration of the pickup's cell at this hour of day (the host's clock, UTC). With
// surge false the cell is not read (Load, Prev stay 0; surge off). Drivers whose heartbeat expired
// stay in the GEO set until the expiry is handled (seconds), so supply and the nearest driver may
// count one who just left.
func (s *Store) ReadSurge(ctx context.Context, surge bool, cell string, box dispatch.Area, window time.Duration, supplyBound int,
	pickup dispatch.Point, nearRadiusM float64, also ...Piggyback) (SurgeRead, error) {
	pipe := s.rdb.Pipeline()
	scripts, skip := queuePiggybacks(ctx, pipe, []*redis.Script{demandCountScript}, also)
	var demand *redis.Cmd
	var supply *redis.StringSliceCmd
	var mult *redis.SliceCmd
	if surge {
		demand = demandCountScript.EvalSha(ctx, pipe, []string{s.surgeDemandKey(cell)}, window.Milliseconds())
		c := box.Center()
		h, w := box.SizeM()
		supply = pipe.GeoSearch(ctx, s.geoKey(), &redis.GeoSearchQuery{
			Longitude: c.Lng, Latitude: c.Lat, BoxWidth: w, BoxHeight: h, BoxUnit: "m", Count: supplyBound,
		})
		mult = pipe.HMGet(ctx, s.surgeMultKey(cell), "m", "at")
	}
	near := pipe.GeoSearchLocation(ctx, s.geoKey(), &redis.GeoSearchLocationQuery{
		GeoSearchQuery: redis.GeoSearchQuery{Longitude: pickup.Lng, Latitude: pickup.Lat, Radius: nearRadiusM, RadiusUnit: "m", Sort: "ASC", Count: 1},
		WithDist:       true,
	})
	delay := pipe.HGet(ctx, s.matchDelayKey(), "ewma")
	pace := pipe.HMGet(ctx, s.drivePaceKey(), "s", "m", "n")
	cal := s.waitCalCmds(ctx, pipe, pickup, time.Now())
	cmds, err := ExecScripts(ctx, s.rdb, pipe, scripts...)
	if err := ownErr(cmds, skip, err); err != nil {
		return SurgeRead{}, unavailable(err)
	}
	out := SurgeRead{NearestM: -1, WaitCalibrationS: waitCalOf(cal)}
	if surge {
		v, err := demand.Int64Slice()
		if err != nil || len(v) != 2 {
			return SurgeRead{}, unavailable(errors.Join(errors.New("surge demand count"), err))
		}
		out.Load.Demand, out.NowMs = int(v[0]), v[1]
		out.Load.Supply = len(supply.Val())
		if vals := mult.Val(); len(vals) == 2 {
			if m, ok := vals[0].(string); ok {
				out.Prev = f64(m)
			}
			if at, ok := vals[1].(string); ok {
				out.PrevAtMs, _ = strconv.ParseInt(at, 10, 64)
			}
		}
	}
	if locs := near.Val(); len(locs) > 0 {
		out.NearestM = locs[0].Dist
	}
	if v, err := delay.Float64(); err == nil && v > 0 {
		out.MatchDelayS = v
	}
	out.DrivePace = drivePaceOf(pace.Val())
	return out, nil
}

// drivePaceOf is the drive pace of the answer to HMGET drivepace s m n; zero when absent.
func drivePaceOf(vals []any) dispatch.DrivePace {
	if len(vals) != 3 {
		return dispatch.DrivePace{}
	}
	ss, _ := vals[0].(string)
	ms, _ := vals[1].(string)
	ns, _ := vals[2].(string)
	n, _ := strconv.Atoi(ns)
	return dispatch.DrivePace{DriveS: f64(ss), DistM: f64(ms), N: n}
}

// drivePaceScript folds one pickup into the learned drive pace (scripts/drive_pace.lua).
var drivePaceScript = loadScript("drive_pace.lua")

// RecordDriveSample folds one driver's drive to his pickup (seconds in the riders' time, and his
// straight-line distance in metres when offered) into the learned drive pace, weight
// dispatch.DrivePaceAlpha (dispatch.FoldDrivePace); a sample that is not a finite number ≥ 0 is
// not sent.
func (s *Store) RecordDriveSample(ctx context.Context, d dispatch.DriveSample) error {
	if dispatch.FoldDrivePace(dispatch.DrivePace{}, d.DriveS, d.DistM).N == 0 {
		return nil
	}
	return unavailable(drivePaceScript.Run(ctx, s.rdb, []string{s.drivePaceKey()},
		strconv.FormatFloat(d.DriveS, 'f', 3, 64), strconv.FormatFloat(d.DistM, 'f', 3, 64),
		strconv.FormatFloat(dispatch.DrivePaceAlpha, 'f', -1, 64), int64(WaitCalibrationTTL.Seconds())).Err())
}

// surgeStoreScript stores a cell's new multiplier compare-and-set on the time of the one it was
// computed from (scripts/surge_store.lua).
var surgeStoreScript = loadScript(nowLua, "surge_store.lua")

// StoreSurge stores multiplier m for cell if the stored one is still the one of prevAtMs (0: none)
// and interval has passed since it; the key lives ttl after the update (after that the cell has no
// data again: 1.0). It returns the cell's multiplier after the call (m, or the value another update
// stored) and whether m was stored.
func (s *Store) StoreSurge(ctx context.Context, cell string, m float64, prevAtMs int64, interval, ttl time.Duration) (float64, bool, error) {
	v, err := surgeStoreScript.Run(ctx, s.rdb, []string{s.surgeMultKey(cell)},
		strconv.FormatFloat(m, 'f', -1, 64), prevAtMs, interval.Milliseconds(), ttl.Milliseconds()).Slice()
	if err != nil || len(v) != 3 {
		return 1, false, unavailable(errors.Join(errors.New("surge store"), err))
	}
	cur, _ := v[0].(string)
	stored, _ := v[2].(int64)
	return f64(cur), stored == 1, nil
}

// matchDelayScript folds one match delay into the EWMA (scripts/match_delay.lua).
var matchDelayScript = loadScript("match_delay.lua")

// RecordMatchDelay folds the time from a ride's request to its accept (seconds, ≥ 0) into the
// recent match delay, an EWMA with weight dispatch.MatchDelayAlpha.
func (s *Store) RecordMatchDelay(ctx context.Context, seconds float64) error {
	return unavailable(matchDelayScript.Run(ctx, s.rdb, []string{s.matchDelayKey()},
		strconv.FormatFloat(max(0, seconds), 'f', 3, 64), strconv.FormatFloat(dispatch.MatchDelayAlpha, 'f', -1, 64)).Err())
}

// MatchDelay returns the recent match delay in seconds, 0 before any accept.
func (s *Store) MatchDelay(ctx context.Context) (float64, error) {
	v, err := s.rdb.HGet(ctx, s.matchDelayKey(), "ewma").Float64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, unavailable(err)
}

// PutQuote stores a fare quote (its JSON) under id for ttl.
func (s *Store) PutQuote(ctx context.Context, id string, quote []byte, ttl time.Duration) error {
	return unavailable(s.rdb.Set(ctx, s.quoteKey(id), quote, ttl).Err())
}

// Quote returns the JSON of quote id, nil when it is unknown or expired.
func (s *Store) Quote(ctx context.Context, id string, also ...Piggyback) ([]byte, error) {
	if len(also) == 0 {
		b, err := s.rdb.Get(ctx, s.quoteKey(id)).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return b, unavailable(err)
	}
	pipe := s.rdb.Pipeline()
	scripts, _ := queuePiggybacks(ctx, pipe, nil, also)
	get := pipe.Get(ctx, s.quoteKey(id))
	_, _ = ExecScripts(ctx, s.rdb, pipe, scripts...) // each command holds its own answer
	b, err := get.Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return b, unavailable(err)
}
