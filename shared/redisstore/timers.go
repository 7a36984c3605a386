package redisstore

import (
	"context"
	"strings"
	"time"
)

// KeyKind names a key whose expiry means something.
type KeyKind string

// Kinds of timed keys. Each carries in its name the id its expiry must act on, because the value is
// gone when the expired event arrives.
const (
	// KindHeartbeat: P hb:{driver id}; expiry means the driver stopped pinging (offline).
	KindHeartbeat KeyKind = "heartbeat"
	// KindOfferLock: P offer:{driver id}; expiry means the driver let his offer window pass. The
	// lock is no longer indexed (KindOfferTimer is the offer's timeout); an entry an older version
	// indexed is still acted on.
	KindOfferLock KeyKind = "offer_lock"
	// KindOfferTimer: P offertimer:{offer id}; expiry means that offer's window passed.
	KindOfferTimer KeyKind = "offer_timer"
	// KindRetry: P retry:{ride id}; expiry means it is time to match the ride again.
	KindRetry KeyKind = "retry"
	// KindBatch: P batch:{batch name}:{opened ms}; expiry means that batch window closed: the
	// batch's waiting rides are assigned together (batch matching, see JoinBatch, BatchOfTimer).
	KindBatch KeyKind = "batch"
)

var kindPrefixes = []struct {
	kind KeyKind
	part string
}{{KindHeartbeat, "hb:"}, {KindOfferLock, "offer:"}, {KindOfferTimer, "offertimer:"}, {KindRetry, "retry:"}, {KindBatch, "batch:"}}

// ParseTimedKey tells the kind and id of a flagdown timed key under prefix. ok is false for any
// other key (other applications' keys, flagdown keys whose expiry means nothing).
func ParseTimedKey(prefix, key string) (kind KeyKind, id string, ok bool) {
	rest, found := strings.CutPrefix(key, prefix)
	if !found {
		return "", "", false
	}
	for _, k := range kindPrefixes {
		if id, found := strings.CutPrefix(rest, k.part); found && id != "" {
			return k.kind, id, true
		}
	}
	return "", "", false
}

// DeadlinesKey is the sorted set indexing every timed key by its deadline (score = unix ms). The
// expiry source sweeps it so that a timeout is acted on within a sweep tick of its deadline even
// when Redis, which expires keys lazily or by sampling, deletes the key late.
func (s *Store) DeadlinesKey() string { return s.prefix + "deadlines" }

// FiredKey is the tombstone set of the deadlines the expiry source already published (score = the
// deadline, unix ms; kept for the broker's duplicate window): see FiredKeyFor.
func (s *Store) FiredKey() string { return FiredKeyFor(s.DeadlinesKey()) }

// FiredKeyFor names the tombstone set of the deadlines set key dk. It shares dk's hash slot (dk's
// own hash tag, or {dk}), so one script can move an entry between them in Redis Cluster too.
func FiredKeyFor(dk string) string {
	if HashTag(dk) != "" {
		return dk + ":fired"
	}
	return "{" + dk + "}:fired"
}

// Prefix is the key prefix of this store.
func (s *Store) Prefix() string { return s.prefix }

// retryKey is the retry timer of a ride.
func (s *Store) retryKey(rideID string) string { return s.prefix + "retry:" + rideID }

// setTimerScript sets a timer key to expire at exactly the deadline it indexes (SET PXAT, see
// scripts/set_timer.lua).
var setTimerScript = loadScript(nowLua, "set_timer.lua")

// SetRetryTimer arms rideID's retry timer to fire after wait. value is informational (the attempt).
func (s *Store) SetRetryTimer(ctx context.Context, rideID, value string, wait time.Duration) error {
	err := setTimerScript.Run(ctx, s.rdb, []string{s.retryKey(rideID), s.DeadlinesKey()},
		value, max(wait.Milliseconds(), 1)).Err()
	return unavailable(err)
}

// ClearRetryTimer disarms rideID's retry timer.
func (s *Store) ClearRetryTimer(ctx context.Context, rideID string) error {
	pipe := s.rdb.TxPipeline()
	pipe.Del(ctx, s.retryKey(rideID))
	pipe.ZRem(ctx, s.DeadlinesKey(), s.retryKey(rideID))
	_, err := pipe.Exec(ctx)
	return unavailable(err)
}
