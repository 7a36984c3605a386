package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Wait calibration keys, for the geohash cell C of a pickup (dispatch.SurgeCellPrecision) and the
// hour of day H (0..23, UTC) of its request:
//
//	P waitcal:{C}:{H}      hash e (the calibration, seconds: dispatch.FoldWaitResidual of the
//	                       residuals of the waits quoted there), n (samples); TTL WaitCalibrationTTL
//	P waitcal:city:{H}     the same over the whole city, the fallback of a cell with fewer than
//	                       dispatch.WaitCalibrationMinSamples samples
func (s *Store) waitCalKey(cell string, hour int) string {
	return s.prefix + "waitcal:" + cell + ":" + strconv.Itoa(hour)
}

// waitCalCity is the cell name of the city-wide calibration.
const waitCalCity = "city"

// WaitCalibrationTTL is how long a calibration is kept without a pickup: a week, so each hour of
// day keeps what the same hour taught on the days before.
const WaitCalibrationTTL = 7 * 24 * time.Hour

// waitCalScript folds one pickup's residual into a calibration (scripts/wait_cal.lua).
var waitCalScript = loadScript("wait_cal.lua")

// RecordWaitError folds residualS, the actual request → pickup time of a ride less the wait it was
// quoted without its calibration part (seconds; dispatch.FoldWaitResidual), into the calibration of its pickup's cell and of the city at the hour of day
// of its request (UTC), in one pipelined round trip (one script per key).
func (s *Store) RecordWaitError(ctx context.Context, pickup dispatch.Point, requestedAt time.Time, residualS float64) error {
	cell, hour := dispatch.Geohash(pickup, dispatch.SurgeCellPrecision), requestedAt.UTC().Hour()
	pipe := s.rdb.Pipeline()
	for _, c := range []string{cell, waitCalCity} {
		waitCalScript.EvalSha(ctx, pipe, []string{s.waitCalKey(c, hour)}, strconv.FormatFloat(residualS, 'f', 3, 64),
			strconv.FormatFloat(dispatch.WaitCalibrationAlpha, 'f', -1, 64), int64(WaitCalibrationTTL.Seconds()))
	}
	_, err := ExecScripts(ctx, s.rdb, pipe, waitCalScript)
	return unavailable(err)
}

// waitCalCmds queues on pipe the reads of the calibrations of pickup's cell and of the city at the
// hour of day of at (UTC); waitCalOf turns their answers into the calibration to apply.
func (s *Store) waitCalCmds(ctx context.Context, pipe redis.Pipeliner, pickup dispatch.Point, at time.Time) [2]*redis.SliceCmd {
	cell, hour := dispatch.Geohash(pickup, dispatch.SurgeCellPrecision), at.UTC().Hour()
	return [2]*redis.SliceCmd{pipe.HMGet(ctx, s.waitCalKey(cell, hour), "e", "n"), pipe.HMGet(ctx, s.waitCalKey(waitCalCity, hour), "e", "n")}
}

// waitCalOf is the calibration in seconds of the cell's answer when it has at least
// dispatch.WaitCalibrationMinSamples samples, else the city's, else 0.
func waitCalOf(cmds [2]*redis.SliceCmd) float64 {
	for k, c := range cmds {
		vals := c.Val()
		if len(vals) != 2 {
			continue
		}
		es, _ := vals[0].(string)
		ns, _ := vals[1].(string)
		n, _ := strconv.Atoi(ns)
		if n >= dispatch.WaitCalibrationMinSamples || (k == 1 && n > 0) {
			return f64(es)
		}
	}
	return 0
}
