package redisstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Adaptive matching keys (FLAGDOWN_MATCH_MODE=auto), for a geohash cell C of a pickup
// (dispatch.SurgeCellPrecision):
//
//	P matchmode:{C}   hash: mode (greedy or batch, the area's current mode), since (unix ms, when
//	                  the area entered it), at (unix ms, its last decision), both the matcher's
//	                  clock (it alone compares them); TTL AreaModeTTL
//
// The supply and demand it decides from are the keys surge keeps already: the available GEO set
// and the cells' demand (P surge:demand:{C}).
func (s *Store) areaModeKey(cell string) string { return s.prefix + "matchmode:" + cell }

// AreaModeTTL is how long an area's matching mode is kept without a decision: after that quiet
// spell the area starts over without hysteresis state.
const AreaModeTTL = 10 * time.Minute

// AreaRead is what ReadArea saw around one pickup.
type AreaRead struct {
	// Drivers is the number of drivers of the available GEO set within the radius asked (at most
	// the bound asked); NearestM and FarthestM the straight-line distances in metres of the nearest
	// and the farthest of them, -1 when there is none.
	Drivers             int
	NearestM, FarthestM float64
	// Requests is the number of rides requested from the cells asked within the window asked
	// (their surge demand; 0 when surge is off, which counts none).
	Requests int
	// Waiting is the number of rides waiting in the city batch for the next window.
	Waiting int
	// MatchDelayS is the recent time from request to accept (RecordMatchDelay), seconds; 0 before
	// any accept.
	MatchDelayS float64
	// Mode is the area's stored matching mode ("" for none), SinceMs when it entered it and AtMs
	// its last decision (unix ms; 0 for none).
	Mode          string
	SinceMs, AtMs int64
}

// ReadArea reads, in one pipelined round trip, the supply and demand around pickup that adaptive
// matching decides from: the available drivers within radiusM metres (GEOSEARCH ASC COUNT bound),
// the requests from cells within window (each cell's demand script, Redis's clock), the rides
// waiting in the city batch, the recent match delay, and the stored mode of area (a cell).
func (s *Store) ReadArea(ctx context.Context, pickup dispatch.Point, radiusM float64, bound int, cells []string, window time.Duration,
	area string) (AreaRead, error) {
	pipe := s.rdb.Pipeline()
	near := pipe.GeoSearchLocation(ctx, s.geoKey(), &redis.GeoSearchLocationQuery{
		GeoSearchQuery: redis.GeoSearchQuery{Longitude: pickup.Lng, Latitude: pickup.Lat, Radius: radiusM, RadiusUnit: "m", Sort: "ASC", Count: bound},
		WithDist:       true,
	})
	demand := make([]*redis.Cmd, len(cells))
	for i, c := range cells {
		demand[i] = demandCountScript.EvalSha(ctx, pipe, []string{s.surgeDemandKey(c)}, window.Milliseconds())
	}
	waiting := pipe.ZCard(ctx, s.batchQueueKey(CityBatch))
	delay := pipe.HGet(ctx, s.matchDelayKey(), "ewma")
	mode := pipe.HMGet(ctx, s.areaModeKey(area), "mode", "since", "at")
	if _, err := ExecScripts(ctx, s.rdb, pipe, demandCountScript); err != nil && !errors.Is(err, redis.Nil) {
		return AreaRead{}, unavailable(err)
	}
	out := AreaRead{NearestM: -1, FarthestM: -1, Waiting: int(waiting.Val())}
	if locs := near.Val(); len(locs) > 0 {
		out.Drivers, out.NearestM, out.FarthestM = len(locs), locs[0].Dist, locs[len(locs)-1].Dist
	}
	for _, d := range demand {
		if v, err := d.Int64Slice(); err == nil && len(v) == 2 {
			out.Requests += int(v[0])
		}
	}
	if v, err := delay.Float64(); err == nil && v > 0 {
		out.MatchDelayS = v
	}
	if vals := mode.Val(); len(vals) == 3 {
		out.Mode, _ = vals[0].(string)
		if v, ok := vals[1].(string); ok {
			out.SinceMs, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := vals[2].(string); ok {
			out.AtMs, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return out, nil
}

// StoreAreaMode records area's matching mode, when it entered it (sinceMs) and its last decision
// (atMs), unix ms; the key lives AreaModeTTL. Two decisions racing write the later one.
func (s *Store) StoreAreaMode(ctx context.Context, area, mode string, sinceMs, atMs int64) error {
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, s.areaModeKey(area), "mode", mode, "since", sinceMs, "at", atMs)
	pipe.PExpire(ctx, s.areaModeKey(area), AreaModeTTL)
	_, err := pipe.Exec(ctx)
	return unavailable(err)
}
