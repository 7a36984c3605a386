package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Batch matching keys (FLAGDOWN_MATCH_MODE=batch), for a batch named B (CityBatch):
//
//	P batch:{B}:{opened}        the batch timer of the window opened at {opened} (unix ms, Redis's
//	                            clock): TTL = the batch window, armed by the first ride to join an
//	                            unarmed batch; its deadline is indexed in P deadlines like every timed
//	                            key, and its expiry (KindBatch) closes the window. Each window has its
//	                            own key, so a ride arming the next window never re-creates the key of
//	                            one whose expiry is on its way (the expiry source skips a re-created
//	                            key, and its deadline entry would be moved: the window would be lost)
//	P batcharmed:{B}            the name of the armed timer, same TTL: a batch is armed while it exists
//	P batchq:{B}                sorted set of the rides waiting for the window (member = ride id,
//	                            score = when it joined, unix ms, Redis's clock)
//	P batchrun:{B}:{deadline}   the claim of the window that closed at deadline (unix ms): the ride ids
//	                            it took out of P batchq:{B} as JSON, then "done" once they were all
//	                            handled; TTL BatchRunTTL
//
// A ride joins with JoinBatch; the window's run takes every waiting ride at once with ClaimBatch, so
// two windows never hold the same ride, and a second run of the same window finds the claim.

// CityBatch is the name of the one batch of a deployment: flagdown serves one city per deployment
// (one available set, P geo:available), so every ride to match in batch mode joins it.
const CityBatch = "city"

// BatchRunTTL is how long the claim of a batch window (P batchrun:...) is kept: longer than any
// redelivery of the window's event by a trigger (5 attempts with backoff from 200 ms). An event
// older than that is recognised by its processed_events row instead (lifecycle.ClaimBatch).
const BatchRunTTL = 10 * time.Minute

// batchDone is the value of a claim whose rides were all handled.
const batchDone = "done"

func (s *Store) batchTimerPrefix(name string) string { return s.prefix + "batch:" + name + ":" }
func (s *Store) batchArmedKey(name string) string    { return s.prefix + "batcharmed:" + name }
func (s *Store) batchQueueKey(name string) string    { return s.prefix + "batchq:" + name }
func (s *Store) batchRunKey(name string, deadlineMs int64) string {
	return s.prefix + "batchrun:" + name + ":" + strconv.FormatInt(deadlineMs, 10)
}

// joinScript adds rides to a batch and arms a new window unless it is armed
// (scripts/join_batch.lua).
var joinScript = loadScript(nowLua, "join_batch.lua")

// JoinBatch adds rideIDs to batch name's waiting rides and arms its timer to fire after window
// (at least 1 ms) unless it is armed: the window opens with the first ride that finds the timer
// unarmed. Joining again is a no-op for a ride already waiting. It reports whether it armed the
// timer. Errors are CodeUnavailable.
func (s *Store) JoinBatch(ctx context.Context, name string, rideIDs []string, window time.Duration) (bool, error) {
	if len(rideIDs) == 0 {
		return false, nil
	}
	args := make([]any, 0, len(rideIDs)+2)
	args = append(args, max(window.Milliseconds(), 1), s.batchTimerPrefix(name))
	for _, id := range rideIDs {
		args = append(args, id)
	}
	n, err := joinScript.Run(ctx, s.rdb, []string{s.batchQueueKey(name), s.batchArmedKey(name), s.DeadlinesKey()}, args...).Int()
	if err != nil {
		return false, unavailable(err)
	}
	return n == 1, nil
}

// claimScript takes every waiting ride of a batch for one window, once (scripts/claim_batch.lua).
var claimScript = loadScript("claim_batch.lua")

// BatchClaim is the claim of one batch window.
type BatchClaim struct {
	// RideIDs are the rides the window took, oldest join first.
	RideIDs []string
	// New is true for the caller that made the claim; false when it existed (a second run of the
	// window: RideIDs are the first run's, to finish what it may have left).
	New bool
	// Done is true when a run of the window handled every ride of it already (RideIDs is nil).
	Done bool
}

// ClaimBatch claims the window of batch name that closed at deadlineMs (unix ms, the batch timer's
// indexed deadline): the first call moves every ride waiting in the batch into the claim, so a ride
// joining later waits for the next window; later calls return that claim (New false), or Done once
// FinishBatch marked it handled. Errors are CodeUnavailable.
func (s *Store) ClaimBatch(ctx context.Context, name string, deadlineMs int64) (BatchClaim, error) {
	v, err := claimScript.Run(ctx, s.rdb, []string{s.batchRunKey(name, deadlineMs), s.batchQueueKey(name)},
		BatchRunTTL.Milliseconds()).Slice()
	if err != nil {
		return BatchClaim{}, unavailable(err)
	}
	n, _ := v[0].(int64)
	return decodeClaim(str(v[1]), n == 1)
}

// PeekBatchClaim returns the claim of batch name's window that closed at deadlineMs, or ok false
// when there is none (never claimed, or older than BatchRunTTL). Errors are CodeUnavailable.
func (s *Store) PeekBatchClaim(ctx context.Context, name string, deadlineMs int64) (c BatchClaim, ok bool, err error) {
	v, err := s.rdb.Get(ctx, s.batchRunKey(name, deadlineMs)).Result()
	if errors.Is(err, redis.Nil) {
		return BatchClaim{}, false, nil
	}
	if err != nil {
		return BatchClaim{}, false, unavailable(err)
	}
	c, err = decodeClaim(v, false)
	return c, err == nil, err
}

func decodeClaim(v string, isNew bool) (BatchClaim, error) {
	if v == batchDone {
		return BatchClaim{Done: true}, nil
	}
	c := BatchClaim{New: isNew}
	if err := json.Unmarshal([]byte(v), &c.RideIDs); err != nil {
		return BatchClaim{}, dispatch.Internal(err)
	}
	return c, nil
}

// FinishBatch marks the claim of batch name's window that closed at deadlineMs handled: a later run
// of the window does nothing. Errors are CodeUnavailable.
func (s *Store) FinishBatch(ctx context.Context, name string, deadlineMs int64) error {
	return unavailable(s.rdb.Set(ctx, s.batchRunKey(name, deadlineMs), batchDone, BatchRunTTL).Err())
}

// BatchWaiting returns the rides waiting in batch name, oldest join first, and whether its timer is
// armed (tests, operators). Errors are CodeUnavailable.
func (s *Store) BatchWaiting(ctx context.Context, name string) (rideIDs []string, armed bool, err error) {
	pipe := s.rdb.Pipeline()
	q := pipe.ZRange(ctx, s.batchQueueKey(name), 0, -1)
	ex := pipe.Exists(ctx, s.batchArmedKey(name))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, unavailable(err)
	}
	return q.Val(), ex.Val() == 1, nil
}

// BatchTimer returns the armed timer of batch name (its full key) and its indexed deadline (unix ms,
// Redis's clock); "" and 0 when the batch is not armed. Errors are CodeUnavailable.
func (s *Store) BatchTimer(ctx context.Context, name string) (key string, deadlineMs int64, err error) {
	key, err = s.rdb.Get(ctx, s.batchArmedKey(name)).Result()
	if errors.Is(err, redis.Nil) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, unavailable(err)
	}
	sc, err := s.rdb.ZScore(ctx, s.DeadlinesKey(), key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, unavailable(err)
	}
	return key, int64(sc), nil
}

// BatchOfTimer returns the batch name of a batch timer's id (the id ParseTimedKey returns for a
// KindBatch key: "{name}:{opened ms}"); ok is false for any other id.
func BatchOfTimer(id string) (name string, ok bool) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 || i == len(id)-1 {
		return "", false
	}
	if _, err := strconv.ParseInt(id[i+1:], 10, 64); err != nil {
		return "", false
	}
	return id[:i], true
}
