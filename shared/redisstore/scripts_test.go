package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// TestExecScriptsRunsEachCommandOnce: after Redis lost its script cache (SCRIPT FLUSH, as after a
// restart or a failover), a pipeline of EVALSHAs around a plain command answers every command, and
// each ran exactly once: the scripts that count calls count 1, the plain INCR between them too.
// Re-sending the whole pipeline would count the INCR twice; not loading the scripts would leave
// NOSCRIPT errors.
func TestExecScriptsRunsEachCommandOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testkit.StartPrivateRedis(t).Client(t)
	a := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	b := redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	run := func() {
		t.Helper()
		pipe := rdb.Pipeline()
		ca := a.EvalSha(ctx, pipe, []string{"a"})
		plain := pipe.Incr(ctx, "plain")
		cb := b.EvalSha(ctx, pipe, []string{"b"}, 10)
		if _, err := redisstore.ExecScripts(ctx, rdb, pipe, a, b); err != nil {
			t.Fatalf("ExecScripts: %v", err)
		}
		if ca.Err() != nil || cb.Err() != nil || plain.Err() != nil {
			t.Fatalf("answers: %v, %v, %v", ca.Err(), plain.Err(), cb.Err())
		}
	}
	for round := range 2 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		run()
		want := map[string]int64{"a": int64(round + 1), "plain": int64(round + 1), "b": int64(10 * (round + 1))}
		for k, w := range want {
			if got, err := rdb.Get(ctx, k).Int64(); err != nil || got != w {
				t.Errorf("round %d: %s = %d (%v), want %d: a command ran twice or not at all", round, k, got, err, w)
			}
		}
	}
	// A script not passed to ExecScripts is not ours to load: its NOSCRIPT comes back.
	pipe := rdb.Pipeline()
	redis.NewScript(`return 1`).EvalSha(ctx, pipe, nil)
	if _, err := redisstore.ExecScripts(ctx, rdb, pipe, a); err == nil {
		t.Error("an unknown script's NOSCRIPT was swallowed")
	}
}
