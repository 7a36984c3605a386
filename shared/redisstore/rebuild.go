package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// generationKey is P generation, the id of the data Redis holds under this prefix.
func (s *Store) generationKey() string { return s.prefix + "generation" }

// Generation returns the id of Redis's current generation for this prefix, P generation, writing a
// fresh one when it is missing (SET NX GET, one round trip). A change of it means Redis lost this
// prefix's data since the caller last read it: it restarted empty, was flushed, or is a server that
// never held it (a failover to a replica keeps it, with the data it replicated). reconcile
// compares it with the one PostgreSQL recorded and rebuilds. Errors are CodeUnavailable.
func (s *Store) Generation(ctx context.Context) (string, error) {
	fresh := uuid.NewString()
	old, err := s.rdb.SetArgs(ctx, s.generationKey(), fresh, redis.SetArgs{Mode: "NX", Get: true}).Result()
	if errors.Is(err, redis.Nil) {
		return fresh, nil // there was none: this one is now Redis's
	}
	if err != nil {
		return "", unavailable(err)
	}
	return old, nil
}

// restoreOfferScript puts back a lost offer lock and timer (scripts/restore_offer.lua).
var restoreOfferScript = loadScript(nowLua, "restore_offer.lua")

// RestoreOffer puts back the lock and timer of driverID's PENDING offer o after Redis lost them:
// the lock (confirmed: PostgreSQL holds the offer) unless one holds him already, and the offer's
// timer at Redis's now + remaining (what is left of its window by PostgreSQL's clock; ≤ 0: its
// expiry is published at the next sweep). It reports whether the lock was restored. Errors are
// CodeUnavailable.
func (s *Store) RestoreOffer(ctx context.Context, driverID string, o dispatch.LiveOffer, remaining time.Duration) (bool, error) {
	value, err := json.Marshal(o)
	if err != nil {
		return false, dispatch.Internal(err)
	}
	n, err := restoreOfferScript.Run(ctx, s.rdb,
		[]string{s.offerKey(driverID), s.geoKey(), s.DeadlinesKey(), s.offerTimerKey(o.OfferID)},
		string(value), remaining.Milliseconds(), driverID).Int()
	if err != nil {
		return false, unavailable(err)
	}
	return n == 1, nil
}
