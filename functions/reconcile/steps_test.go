package function_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	reconcile "github.com/flagdown/flagdown/functions/reconcile"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// TestAFailingStepDoesNotStopTheOthers: with Redis unreachable, the steps that need Redis fail and
// the run answers their error (503), but the steps PostgreSQL alone decides still run in the same
// pass: an ACCEPTED ride past its pickup deadline is re-opened (its Redis effects left to a later
// run), so one broken dependency does not hold back every repair until it is back.
func TestAFailingStepDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-late", fntest.Offset(pickup, 100, 0))
	late := accepted(t, env, "r-late", "d-late")
	env.Exec(t, `UPDATE rides SET accepted_at = now() - interval '2 hours', updated_at = now() - interval '2 hours' WHERE id = $1`, late)

	// The same deployment, but its Redis is a port nothing listens on (a closed listener).
	dead := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	cfg := env.D.Config
	store := redisstore.New(dead, cfg.RedisPrefix, cfg.HeartbeatTTL, cfg.MaxSpeedMPS)
	broken := reconcile.New(host.New(cfg, env.D.DB, store, env.D.Log, nil))

	rep, err := broken.Run(t.Context())
	if err == nil || dispatch.ErrorCode(err) != dispatch.CodeUnavailable {
		t.Errorf("run with Redis unreachable: error %v, want unavailable", err)
	}
	if rep.PickupsOverdue != 1 {
		t.Errorf("pickups_overdue = %d with Redis unreachable, want 1: the PostgreSQL steps must run anyway", rep.PickupsOverdue)
	}
	if got, want := env.GetRide(t, late)["status"], "REQUESTED"; got != want {
		t.Errorf("ride past its pickup deadline: status %v, want %v", got, want)
	}
	// The answer through the handler is the first failure's status.
	status, _ := fntest.Do(t, broken, http.MethodPost, "/", nil, fntest.InternalHeaders())
	if status != http.StatusServiceUnavailable {
		t.Errorf("handler status = %d with Redis unreachable, want 503", status)
	}
}

// closedAddr returns a 127.0.0.1 address nothing listens on (a port just freed).
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
