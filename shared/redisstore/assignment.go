package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// assignScript applies a driver's assignment from PostgreSQL compare-and-set on its epoch
// (scripts/assign.lua: its KEYS, ARGV and rules).
var assignScript = loadScript(nowLua, availableLua, "assign.lua")

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
	keys := []string{s.driverKey(a.DriverID), s.geoKey(), s.onRideKey(), s.hbKey(a.DriverID), s.offerKey(a.DriverID),
		s.fenceKey(a.DriverID), s.fenceMaxKey(), s.DeadlinesKey()}
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
		lat, lng, s.prefix + "ridepos:", s.RidePosTTL.Milliseconds(), s.DriverStateTTL.Milliseconds(), s.HeartbeatTTL.Milliseconds()}
}

// ApplyAssignment makes Redis hold a (see assignScript) unless the driver's fence already holds a's
// token or a newer one (a's own token re-applies only when the hash lost its epoch). It returns what it did, or a CodeUnavailable error when Redis cannot be reached.
func (s *Store) ApplyAssignment(ctx context.Context, a dispatch.Assignment) (ApplyResult, error) {
	n, err := assignScript.Run(ctx, s.rdb, s.assignKeys(a), s.assignArgs(a)...).Int()
	if err != nil {
		return AssignNoop, unavailable(err)
	}
	return ApplyResult(n), nil
}

// releaseScript releases an offer lock compare-and-delete on its offer id, and optionally
// re-applies the available-set rule (scripts/release_offer.lua).
var releaseScript = loadScript(nowLua, availableLua, "release_offer.lua")

// ReleaseOffer deletes offerID's timer, and driverID's offer lock if it still holds offerID and, when requeue is true,
// puts a still-available, alive driver without a ride back in the GEO set. It reports whether the
// lock was released; errors are CodeUnavailable.
func (s *Store) ReleaseOffer(ctx context.Context, driverID, offerID string, requeue bool) (bool, error) {
	flag := "0"
	if requeue {
		flag = "1"
	}
	n, err := releaseScript.Run(ctx, s.rdb,
		[]string{s.offerKey(driverID), s.driverKey(driverID), s.hbKey(driverID), s.geoKey(), s.DeadlinesKey(), s.offerTimerKey(offerID)},
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
		if err := s.RecordWaitError(ctx, w.Pickup, w.RequestedAt, w.ResidualS); err != nil {
			errs = append(errs, fmt.Errorf("record wait error: %w", err))
		}
	}
	for _, d := range fx.DriveSamples {
		if err := s.RecordDriveSample(ctx, d); err != nil {
			errs = append(errs, fmt.Errorf("record drive sample: %w", err))
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
	// Epoch is the driver's fence: the highest fencing token applied for him (P fence:{id}, or the
	// hash's epoch when that is higher), 0 when none. It survives the loss of the hash (Exists false).
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
	fence := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		hs[i] = pipe.HMGet(ctx, s.driverKey(id), "status", "ride", "epoch")
		fence[i] = pipe.Get(ctx, s.fenceKey(id))
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
			Status: dispatch.DriverStatus(str(v[0])), RideID: str(v[1]), Epoch: max(atoi64(str(v[2])), atoi64(fence[i].Val())),
			InAvailable: geo[i].Err() == nil, Alive: hb[i].Val() == 1,
		}
	}
	return out, nil
}

// MaxFence returns the highest fencing token Redis applied for any driver (P fence:max), 0 when
// none. Errors are CodeUnavailable.
func (s *Store) MaxFence(ctx context.Context) (int64, error) {
	v, err := s.rdb.Get(ctx, s.fenceMaxKey()).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, unavailable(err)
	}
	return atoi64(v), nil
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
