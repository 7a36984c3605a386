package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// This file holds the read-only, pipelined reads of `flagdown verify` (package shared/invariants).

// verifyChunk bounds the commands of one pipelined round trip.
const verifyChunk = 500

// RetryTimer is what Redis holds of one ride's retry timer (P retry:{ride id}).
type RetryTimer struct {
	// Armed reports whether the timer key exists, or the ride waits in the batch (batch matching:
	// P batchq:{CityBatch}) while the batch timer exists: its window will match it.
	Armed bool
	// Deadline is the timer's deadline in the deadlines index (Redis's clock), zero when the index
	// has no entry. An entry whose key is gone is a timer that fired and whose expiry the expiry
	// source has not published yet. Once published, the entry moves to the tombstone set
	// (FiredKey), and Deadline is the deadline found there.
	Deadline time.Time
}

// RetryTimers reads the retry timer of each ride in pipelined round trips, with Redis's clock at
// the start of the read. Errors are CodeUnavailable.
func (s *Store) RetryTimers(ctx context.Context, rideIDs []string) (now time.Time, timers []RetryTimer, err error) {
	now, err = s.Now(ctx)
	if err != nil {
		return time.Time{}, nil, err
	}
	timers = make([]RetryTimer, 0, len(rideIDs))
	for start := 0; start < len(rideIDs); start += verifyChunk {
		chunk := rideIDs[start:min(start+verifyChunk, len(rideIDs))]
		pipe := s.rdb.Pipeline()
		ex := make([]*redis.IntCmd, len(chunk))
		dl := make([]*redis.FloatCmd, len(chunk))
		fired := make([]*redis.FloatCmd, len(chunk))
		batched := make([]*redis.FloatCmd, len(chunk))
		batchArmed := pipe.Exists(ctx, s.batchArmedKey(CityBatch))
		for i, id := range chunk {
			batched[i] = pipe.ZScore(ctx, s.batchQueueKey(CityBatch), id)
			ex[i] = pipe.Exists(ctx, s.retryKey(id))
			dl[i] = pipe.ZScore(ctx, s.DeadlinesKey(), s.retryKey(id))
			fired[i] = pipe.ZScore(ctx, s.FiredKey(), s.retryKey(id))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return time.Time{}, nil, unavailable(err)
		}
		for i := range chunk {
			_, inBatch := batched[i].Result()
			t := RetryTimer{Armed: ex[i].Val() == 1 || (inBatch == nil && batchArmed.Val() == 1)}
			if sc, err := dl[i].Result(); err == nil {
				t.Deadline = time.UnixMilli(int64(math.Round(sc)))
			} else if sc, err := fired[i].Result(); err == nil {
				t.Deadline = time.UnixMilli(int64(math.Round(sc)))
			}
			timers = append(timers, t)
		}
	}
	return now, timers, nil
}

// RidePositionDrivers returns, for each ride, the driver its live position names (P ridepos:{ride
// id} field driver; "" when there is none or it is a tombstone), in pipelined round trips. Errors
// are CodeUnavailable.
func (s *Store) RidePositionDrivers(ctx context.Context, rideIDs []string) ([]string, error) {
	out := make([]string, 0, len(rideIDs))
	for start := 0; start < len(rideIDs); start += verifyChunk {
		chunk := rideIDs[start:min(start+verifyChunk, len(rideIDs))]
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(chunk))
		for i, id := range chunk {
			cmds[i] = pipe.HGet(ctx, s.ridePosKey(id), "driver")
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, unavailable(err)
		}
		for _, c := range cmds {
			out = append(out, c.Val())
		}
	}
	return out, nil
}

// OfferLock is one driver's offer lock (P offer:{driver id}) and the offer it holds.
type OfferLock struct {
	DriverID string
	Offer    dispatch.LiveOffer
}

// OfferLocks returns every offer lock under the store's prefix (SCAN, then pipelined GETs), sorted
// by driver id; a lock that expired between the two is left out, one whose value is not an offer
// keeps only its driver id. Errors are CodeUnavailable.
func (s *Store) OfferLocks(ctx context.Context) ([]OfferLock, error) {
	prefix := s.prefix + "offer:"
	var out []OfferLock
	err := s.scanKeys(ctx, globEscape(prefix)+"*", func(ctx context.Context, c *redis.Client, keys []string) error {
		vals, err := c.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		for i, v := range vals {
			str, ok := v.(string)
			if !ok {
				continue
			}
			l := OfferLock{DriverID: strings.TrimPrefix(keys[i], prefix)}
			_ = json.Unmarshal([]byte(str), &l.Offer) // a foreign value: no offer id, found by its driver
			out = append(out, l)
		}
		return nil
	})
	if err != nil {
		return nil, unavailable(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DriverID < out[j].DriverID })
	return out, nil
}

// OfferLockHolders returns, for each driver, the offer id his offer lock holds ("" when he has
// none or it holds no offer), in pipelined round trips. Errors are CodeUnavailable.
func (s *Store) OfferLockHolders(ctx context.Context, driverIDs []string) ([]string, error) {
	out := make([]string, 0, len(driverIDs))
	for start := 0; start < len(driverIDs); start += verifyChunk {
		chunk := driverIDs[start:min(start+verifyChunk, len(driverIDs))]
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(chunk))
		for i, id := range chunk {
			cmds[i] = pipe.Get(ctx, s.offerKey(id))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, unavailable(err)
		}
		for _, c := range cmds {
			var o dispatch.LiveOffer
			if v := c.Val(); v != "" {
				_ = json.Unmarshal([]byte(v), &o) // not an offer: holds none
			}
			out = append(out, o.OfferID)
		}
	}
	return out, nil
}
