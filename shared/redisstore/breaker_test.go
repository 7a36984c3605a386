package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// A client of a Redis that stopped answering (SIGSTOP: it keeps its port and its connections)
// stops sending it commands once none was answered for a while: the next ones fail at once with
// ErrNotAnswering (CodeUnavailable through the store), so a request PostgreSQL decides is not held
// for the Redis timeout at every one of its Redis steps. Once Redis answers again a probe gets
// through and commands flow again. Answers that are errors (a missing key, a script error) are
// answers: any number of them leaves the client sending. On a private redis-server.
func TestClientStopsSendingToARedisThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, rdb := openPrivate(t)

	for range 20 { // answers that are errors never stop the client
		if err := rdb.Get(ctx, "breaker:missing").Err(); err == nil {
			t.Fatal("GET of a missing key answered a value")
		}
		if err := rdb.Eval(ctx, "return redis.error_reply('no')", nil).Err(); err == nil {
			t.Fatal("a script error answered no error")
		}
	}
	if err := rdb.Set(ctx, "breaker:k", "v", time.Minute).Err(); err != nil {
		t.Fatalf("after 40 error answers a SET was not sent: %v", err)
	}

	r.Pause(t)
	paused := true
	defer func() {
		if paused {
			r.Resume(t)
		}
	}()
	unanswered := func() error {
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		return rdb.Get(cctx, "breaker:k").Err()
	}
	// The answers just before the pause keep the client sending until they are breakerSilence (2 s)
	// old: a bounded number of attempts, never a timed assertion.
	var last error
	for i := range 100 {
		last = unanswered()
		if last == nil {
			t.Fatalf("command %d answered by a paused Redis", i)
		}
		if errors.Is(last, redisstore.ErrNotAnswering) {
			break
		}
	}
	if !errors.Is(last, redisstore.ErrNotAnswering) {
		t.Fatalf("after 100 unanswered commands the client still sends them (last error %v), want ErrNotAnswering", last)
	}
	store := redisstore.New(rdb, "breaker:"+testkit.ID()+":", 30*time.Second, 40)
	if err := store.Ping(ctx); dispatch.ErrorCode(err) != dispatch.CodeUnavailable || !errors.Is(err, redisstore.ErrNotAnswering) {
		t.Fatalf("store.Ping while the client stopped sending = %v, want CodeUnavailable wrapping ErrNotAnswering", err)
	}

	r.Resume(t)
	paused = false
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		err := rdb.Get(ctx, "breaker:k").Err()
		return err == nil, "GET after Redis answers again: " + errString(err)
	})
}

// openPrivate starts a private redis-server and opens a client of it as the platform does
// (redisstore.Open, breaker included), closed when t ends.
func openPrivate(t *testing.T) (*testkit.PrivateRedis, redis.UniversalClient) {
	t.Helper()
	r := testkit.StartPrivateRedis(t)
	rdb, err := redisstore.Open(context.Background(), r.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return r, rdb
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// A Redis that answers some commands while others miss their deadline (a busy host, callers with
// short deadlines) is never cut off: 200 commands that miss their deadline, each few after an
// answered one, leave the client sending.
func TestClientKeepsSendingToARedisThatAnswersSome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb := openPrivate(t)
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	for i := range 200 {
		if i%20 == 0 {
			if err := rdb.Set(ctx, "breaker:k", i, time.Minute).Err(); err != nil {
				t.Fatalf("command %d of a Redis that answers: %v", i, err)
			}
		}
		err := rdb.Get(expired, "breaker:k").Err()
		if errors.Is(err, redisstore.ErrNotAnswering) {
			t.Fatalf("after %d missed deadlines among answered commands the client stopped sending", i)
		}
	}
	if err := rdb.Get(ctx, "breaker:k").Err(); err != nil {
		t.Fatalf("GET after the missed deadlines: %v", err)
	}
}
