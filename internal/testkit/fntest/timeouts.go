package fntest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/events"
	expirynotification "github.com/flagdown/flagdown/functions/expiry-notification"
	reconcile "github.com/flagdown/flagdown/functions/reconcile"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/outbox"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// TimeoutEnv is an Env with the functions that handle timeouts: expiry-notification (fed the
// expiry source's io.flagdown.redis.key.expired.v1 events) and reconcile (the backstop).
type TimeoutEnv struct {
	*Env
	// Expiry is the expiry-notification function (CloudEvents).
	Expiry http.Handler
	// Reconcile is the reconcile function; call Run directly or serve it over HTTP.
	Reconcile *reconcile.Function
}

// NewTimeoutEnv builds a TimeoutEnv over testkit.Deps(t, tune).
func NewTimeoutEnv(t testing.TB, tune func(*config.Config)) *TimeoutEnv {
	t.Helper()
	env := NewEnv(t, tune)
	return &TimeoutEnv{Env: env, Expiry: expirynotification.New(env.D.Deps), Reconcile: reconcile.New(env.D.Deps)}
}

// ExpiredEvent returns the event the expiry source sends when the timed key name (relative to this
// test's prefix, e.g. "hb:d-1", "offer:d-1", "retry:<ride id>") expired: type RedisKeyExpired,
// source /flagdown/expiry-source, subject and data.key the full key, a fresh id. Kind and ID are
// filled in from the key name when it is a timed key.
func (e *Env) ExpiredEvent(name string) Event {
	key := e.Key(name)
	data := events.RedisKeyExpiredData{Key: key, ObservedAt: time.Now().UTC()}
	if kind, id, ok := redisstore.ParseTimedKey(e.D.Redis.Prefix(), key); ok {
		data.Kind, data.ID = string(kind), id
	}
	return Event{ID: "exp-" + testkit.ID(), Source: "/flagdown/expiry-source", Type: events.RedisKeyExpired, Subject: key, Data: data}
}

// Expire sends ev to the expiry-notification function and returns its outcome; it fails the test
// unless the answer is 200.
func (e *TimeoutEnv) Expire(t testing.TB, ev Event) string {
	t.Helper()
	status, body := SendEvent(t, e.Expiry, ev)
	if status != http.StatusOK {
		t.Fatalf("expiry-notification %s: status %d: %v", ev.Subject, status, body)
	}
	out, _ := body["outcome"].(string)
	return out
}

// DeleteKey deletes the key name under this test's prefix, as Redis does when the key expires
// (without notifying anybody: send ExpiredEvent for that).
func (e *Env) DeleteKey(t testing.TB, name string) {
	t.Helper()
	if err := e.D.Redis.Client().Del(context.Background(), e.Key(name)).Err(); err != nil {
		t.Fatalf("del %s: %v", name, err)
	}
}

// ExpireHeartbeat makes driverID's heartbeat expire as if its deadline passed a minute ago: the
// heartbeat key is deleted (without notifying anybody) and the deadline the ping script keeps in
// his hash (hbdl, Redis's clock) is moved into the past, so reconcile's grace has passed too.
func (e *Env) ExpireHeartbeat(t testing.TB, driverID string) {
	t.Helper()
	ctx := context.Background()
	rdb := e.D.Redis.Client()
	if err := rdb.Del(ctx, e.Key("hb:"+driverID)).Err(); err != nil {
		t.Fatalf("del hb:%s: %v", driverID, err)
	}
	tm, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatalf("redis TIME: %v", err)
	}
	if err := rdb.HSet(ctx, e.Key("driver:"+driverID), "hbdl", tm.Add(-time.Minute).UnixMilli()).Err(); err != nil {
		t.Fatalf("hset hbdl: %v", err)
	}
}

// KeyExists reports whether the key name exists under this test's prefix.
func (e *Env) KeyExists(t testing.TB, name string) bool {
	t.Helper()
	n, err := e.D.Redis.Client().Exists(context.Background(), e.Key(name)).Result()
	if err != nil {
		t.Fatalf("exists %s: %v", name, err)
	}
	return n == 1
}

// KeyTTL returns the remaining time to live of the key name under this test's prefix (PTTL:
// negative when the key has no TTL or does not exist).
func (e *Env) KeyTTL(t testing.TB, name string) time.Duration {
	t.Helper()
	d, err := e.D.Redis.Client().PTTL(context.Background(), e.Key(name)).Result()
	if err != nil {
		t.Fatalf("pttl %s: %v", name, err)
	}
	return d
}

// Deadline returns the deadline indexed for the key name in the deadlines sorted set, and whether
// it is indexed.
func (e *Env) Deadline(t testing.TB, name string) (time.Time, bool) {
	t.Helper()
	ms, err := e.D.Redis.Client().ZScore(context.Background(), e.D.Redis.DeadlinesKey(), e.Key(name)).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false
	}
	if err != nil {
		t.Fatalf("zscore deadlines %s: %v", name, err)
	}
	return time.UnixMilli(int64(ms)), true
}

// DriverField returns the field of driverID's state hash in Redis ("status", "ride", "missed",
// ...), "" when it is not set.
func (e *Env) DriverField(t testing.TB, driverID, field string) string {
	t.Helper()
	v, err := e.D.Redis.Client().HGet(context.Background(), e.Key("driver:"+driverID), field).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("hget driver:%s %s: %v", driverID, field, err)
	}
	return v
}

// InGeo reports whether driverID is a member of the available GEO set.
func (e *Env) InGeo(t testing.TB, driverID string) bool {
	t.Helper()
	return e.GeoPos(t, driverID) != nil
}

// OutboxData returns the decoded data of the outbox rows of type typ written for subject, in
// insertion order.
func (e *Env) OutboxData(t testing.TB, subject, typ string) []JSON {
	t.Helper()
	rows, err := e.D.DB.Pool.Query(context.Background(),
		`SELECT data FROM outbox WHERE subject = $1 AND type = $2 ORDER BY id`, subject, typ)
	if err != nil {
		t.Fatalf("outbox data of %s: %v", subject, err)
	}
	defer rows.Close()
	var out []JSON
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatalf("outbox data of %s: %v", subject, err)
		}
		var v JSON
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("outbox data of %s: %v", subject, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("outbox data of %s: %v", subject, err)
	}
	return out
}

// CountOutbox returns the number of outbox rows of type typ, for subject when it is not empty.
func (e *Env) CountOutbox(t testing.TB, typ, subject string) int {
	t.Helper()
	if subject == "" {
		return e.Count(t, `SELECT count(*) FROM outbox WHERE type = $1`, typ)
	}
	return e.Count(t, `SELECT count(*) FROM outbox WHERE type = $1 AND subject = $2`, typ, subject)
}

// InsertOutboxRow writes one outbox row of type typ for subject (data {"ride_id": subject}) dated
// age ago, as a relay that was down would have left it, and returns its event id.
func (e *Env) InsertOutboxRow(t testing.TB, typ, subject string, age time.Duration) string {
	t.Helper()
	ctx := context.Background()
	var id string
	err := e.D.DB.Tx(ctx, func(tx pgx.Tx) error {
		var err error
		id, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{Type: typ, Source: "/test", Subject: subject, Data: JSON{"ride_id": subject}})
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE outbox SET created_at = now() - $2 * interval '1 millisecond' WHERE event_id = $1`, id, age.Milliseconds())
		return err
	})
	if err != nil {
		t.Fatalf("insert outbox row: %v", err)
	}
	return id
}

// Exec runs a statement against this test's schema (to age or break state on purpose).
func (e *Env) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := e.D.DB.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// StartRelay runs an outbox relay over this test's schema, signing with testkit.EventSigner and
// publishing to a JetStream stream of its own on testkit.NATS, until the test ends; it returns the
// broker.
func (e *Env) StartRelay(t testing.TB) *broker.Broker {
	t.Helper()
	id := testkit.ID()
	b, err := broker.Connect(context.Background(), testkit.NATS(t), "T_"+strings.ToUpper(id), "t"+id+".events")
	if err != nil {
		t.Fatalf("broker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	relay := outbox.New(e.D.DB, b.Publish, outbox.Options{Log: e.D.Log, PollInterval: 100 * time.Millisecond, Keys: testkit.EventSigner()})
	go func() {
		defer close(done)
		_ = relay.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = b.JetStream().DeleteStream(context.Background(), b.Stream())
		_ = b.JetStream().DeleteStream(context.Background(), b.DLQStream())
		b.Close()
	})
	return b
}

// Unpublished returns the number of outbox rows not yet published.
func (e *Env) Unpublished(t testing.TB) int {
	t.Helper()
	return e.Count(t, `SELECT count(*) FROM outbox WHERE published_at IS NULL`)
}
