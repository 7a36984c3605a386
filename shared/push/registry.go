package push

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// User is who holds a connection: a verified token's role and subject (shared/auth.Identity).
type User struct {
	// Role is driver, rider or ops.
	Role auth.Role
	// ID is the token's subject: the driver, rider or operator id.
	ID string
}

// String is "role:id".
func (u User) String() string { return string(u.Role) + ":" + u.ID }

// ConnectionTTL is how long a registered connection is kept without being unregistered: API
// Gateway closes every WebSocket connection after 2 hours at most, so an entry whose $disconnect
// was lost is gone 10 minutes after its socket must have been.
const ConnectionTTL = 2*time.Hour + 10*time.Minute

// MaxConnectionsPerUser is how many live connections (devices, tabs) one user may hold; registering
// one more evicts his oldest, which Register returns so the caller can close it.
const MaxConnectionsPerUser = 5

// The headers of the gateway's integration calls to the notify function (API Gateway request
// parameter mappings in production, flagdown dev's local gateway here), besides the internal
// Authorization: Bearer <internal token> (FLAGDOWN_INTERNAL_TOKEN).
const (
	// HeaderConnectionID carries the gateway's connection id (context.connectionId) on every call.
	HeaderConnectionID = "X-Flagdown-Connection-Id"
	// HeaderClientToken carries the phone's bearer token on the $connect call.
	HeaderClientToken = "X-Flagdown-Client-Token"
)

// MaxConnectionIDLen is the longest connection id accepted (API Gateway's are 16 characters).
const MaxConnectionIDLen = 128

// Registry is the connection registry in Redis: which live WebSocket connections each user holds.
//
// Keys (under the deployment's prefix):
//
//	Z ws:user:{role:id}  sorted set of connection ids, score = registration expiry (unix ms)
//	S ws:conn:<conn id>  "role:id" of the connection, expiring with it (PX ConnectionTTL)
//	S ws:rider:<ride id> the ride's rider, while it has a driver (position pushes)
//
// Each operation touches one key per command (no multi-key script), so the registry works the same
// on a Redis Cluster; with the city's hash tag in the prefix (redisstore.CheckPrefix) every key is
// on the city's shard (the {role:id} of a user key is not its tag: Redis reads the first one).
type Registry struct {
	rdb    redis.UniversalClient
	prefix string
	// TTL is how long a registration lasts (ConnectionTTL unless changed).
	TTL time.Duration
	// now is the clock of expiry scores (time.Now; tests may change it).
	now func() time.Time
}

// NewRegistry returns the registry over rdb with keys under prefix.
func NewRegistry(rdb redis.UniversalClient, prefix string) *Registry {
	return &Registry{rdb: rdb, prefix: prefix, TTL: ConnectionTTL, now: time.Now}
}

func (r *Registry) userKey(u User) string     { return r.prefix + "ws:user:{" + u.String() + "}" }
func (r *Registry) connKey(id string) string  { return r.prefix + "ws:conn:" + id }
func (r *Registry) riderKey(id string) string { return r.prefix + "ws:rider:" + id }

// ValidateConnectionID checks a gateway connection id: 1..MaxConnectionIDLen printable ASCII
// characters other than space. It returns a CodeInvalidArgument error naming field.
func ValidateConnectionID(field, id string) error {
	if id == "" || len(id) > MaxConnectionIDLen {
		return dispatch.Invalid(field, fmt.Sprintf("must be 1..%d characters", MaxConnectionIDLen))
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return dispatch.Invalid(field, "must be printable ASCII without spaces")
		}
	}
	return nil
}

func unavailable(err error) error { return dispatch.Unavailable("redis", err) }

// Register records that u holds connection connID, for TTL. It returns the connection ids evicted
// because u now holds more than MaxConnectionsPerUser (oldest first); the caller closes them.
func (r *Registry) Register(ctx context.Context, u User, connID string) ([]string, error) {
	return r.RegisterUntil(ctx, u, connID, r.now().Add(r.TTL))
}

// RegisterUntil is Register for a connection that ends at until (the expiry of the token it was
// opened with) or after TTL, whichever comes first: from then on nothing is posted to it and
// Lookup does not find it. An until already past is a CodeUnauthenticated error.
func (r *Registry) RegisterUntil(ctx context.Context, u User, connID string, until time.Time) ([]string, error) {
	now := r.now()
	ttl := r.TTL
	if d := until.Sub(now); d < ttl {
		ttl = d
	}
	if ttl <= 0 {
		return nil, &dispatch.Error{Code: dispatch.CodeUnauthenticated, Field: HeaderClientToken, Message: "the token has expired"}
	}
	exp := now.Add(ttl).UnixMilli()
	uk := r.userKey(u)
	pipe := r.rdb.Pipeline()
	pipe.ZRemRangeByScore(ctx, uk, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
	pipe.ZAdd(ctx, uk, redis.Z{Score: float64(exp), Member: connID})
	pipe.PExpire(ctx, uk, r.TTL)
	pipe.Set(ctx, r.connKey(connID), u.String(), ttl)
	card := pipe.ZCard(ctx, uk)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, unavailable(err)
	}
	extra := card.Val() - MaxConnectionsPerUser
	if extra <= 0 {
		return nil, nil
	}
	popped, err := r.rdb.ZPopMin(ctx, uk, extra).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	evicted := make([]string, 0, len(popped))
	for _, z := range popped {
		id, _ := z.Member.(string)
		if id == connID { // never evict the one just registered (equal scores)
			r.rdb.ZAdd(ctx, uk, z)
			continue
		}
		evicted = append(evicted, id)
		r.rdb.Del(ctx, r.connKey(id))
	}
	return evicted, nil
}

// Lookup returns who holds connID; ok is false when it is not registered (never was, unregistered,
// or expired).
func (r *Registry) Lookup(ctx context.Context, connID string) (u User, ok bool, err error) {
	v, err := r.rdb.Get(ctx, r.connKey(connID)).Result()
	if errors.Is(err, redis.Nil) {
		return User{}, false, nil
	}
	if err != nil {
		return User{}, false, unavailable(err)
	}
	role, id, found := strings.Cut(v, ":")
	if !found {
		return User{}, false, nil
	}
	return User{Role: auth.Role(role), ID: id}, true, nil
}

// Unregister forgets connID (the $disconnect route). It returns who held it; ok is false when it
// was not registered. Unregistering twice is harmless.
func (r *Registry) Unregister(ctx context.Context, connID string) (User, bool, error) {
	u, ok, err := r.Lookup(ctx, connID)
	if err != nil || !ok {
		return u, ok, err
	}
	return u, true, r.Remove(ctx, u, connID)
}

// Remove forgets that u holds connID (a 410 GoneException from the gateway, or Unregister).
func (r *Registry) Remove(ctx context.Context, u User, connID string) error {
	pipe := r.rdb.Pipeline()
	pipe.ZRem(ctx, r.userKey(u), connID)
	pipe.Del(ctx, r.connKey(connID))
	if _, err := pipe.Exec(ctx); err != nil {
		return unavailable(err)
	}
	return nil
}

// Connections returns the live connection ids of u, oldest first.
func (r *Registry) Connections(ctx context.Context, u User) ([]string, error) {
	ids, err := r.rdb.ZRangeByScore(ctx, r.userKey(u), &redis.ZRangeBy{
		Min: strconv.FormatInt(r.now().UnixMilli(), 10), Max: "+inf",
	}).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	return ids, nil
}

// Count returns how many connections are registered under the registry's prefix (a SCAN of the
// ws:conn keys, on every master of a Redis Cluster: for checks after a run, not for request paths).
func (r *Registry) Count(ctx context.Context) (int, error) {
	var n atomic.Int64
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, r.prefix+"ws:conn:*", 1000).Iterator()
		for iter.Next(ctx) {
			n.Add(1)
		}
		return iter.Err()
	}
	var err error
	if c, ok := r.rdb.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	} else {
		err = scan(ctx, r.rdb)
	}
	if err != nil {
		return 0, unavailable(err)
	}
	return int(n.Load()), nil
}

// SetRideRider records riderID as the rider of rideID while the ride has a driver, so a driver's
// position can be pushed to him without reading PostgreSQL on the ping path. It lasts TTL.
func (r *Registry) SetRideRider(ctx context.Context, rideID, riderID string) error {
	if err := r.rdb.Set(ctx, r.riderKey(rideID), riderID, r.TTL).Err(); err != nil {
		return unavailable(err)
	}
	return nil
}

// RideRider returns the rider recorded for rideID by SetRideRider, "" when none.
func (r *Registry) RideRider(ctx context.Context, rideID string) (string, error) {
	v, err := r.rdb.Get(ctx, r.riderKey(rideID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", unavailable(err)
	}
	return v, nil
}
