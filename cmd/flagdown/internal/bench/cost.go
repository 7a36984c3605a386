package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// cost is a snapshot of what work costs: this process's CPU time (user + system) and Redis's
// command time (INFO commandstats, the sum of usec over every command: Redis's own CPU in
// commands, every client's, so other users of a shared Redis add to it).
type cost struct {
	cpu      time.Duration
	redisUs  int64
	redisErr error
}

func snapshot(ctx context.Context, rdb redis.UniversalClient) cost {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	c := cost{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	c.redisUs, c.redisErr = commandUsec(ctx, rdb)
	return c
}

// commandUsec sums the usec of every command in INFO commandstats.
func commandUsec(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, ",usec=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err == nil {
			sum += n
		}
	}
	return sum, nil
}

// per returns the cost per unit between a and b: process CPU µs and Redis command µs.
func per(a, b cost, units float64) (cpuUs, redisUs float64) {
	if units <= 0 {
		return 0, 0
	}
	cpuUs = float64(b.cpu-a.cpu) / 1e3 / units
	if a.redisErr == nil && b.redisErr == nil {
		redisUs = float64(b.redisUs-a.redisUs) / units
	}
	return cpuUs, redisUs
}

func costNote(cpuUs, redisUs float64, unit string) string {
	return fmt.Sprintf("cost per %s: process CPU %.1f µs (handler and load generator together), Redis %.1f µs", unit, cpuUs, redisUs)
}
