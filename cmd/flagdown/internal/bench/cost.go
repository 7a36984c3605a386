package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// cost is a snapshot of what work costs: this process's CPU time (user + system), Redis's
// command time (INFO commandstats, the sum of usec over every command: Redis's own CPU in
// commands, every client's, so other users of a shared Redis add to it) and Redis's process CPU
// (INFO cpu, used_cpu_user + used_cpu_sys summed over every master: commands plus parsing, I/O
// and the event loop, every client's too).
type cost struct {
	cpu        time.Duration
	redisUs    int64
	redisErr   error
	redisCPUUs float64
	cpuErr     error
}

func snapshot(ctx context.Context, rdb redis.UniversalClient) cost {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	c := cost{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	c.redisUs, c.redisErr = commandUsec(ctx, rdb)
	c.redisCPUUs, c.cpuErr = redisCPU(ctx, rdb)
	return c
}

// redisCPU sums used_cpu_user + used_cpu_sys (INFO cpu, seconds) over every master of rdb (the one
// server of a single-node client), in µs.
func redisCPU(ctx context.Context, rdb redis.UniversalClient) (float64, error) {
	one := func(ctx context.Context, c *redis.Client) (float64, error) {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return 0, err
		}
		var sum float64
		for _, line := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
			}
			sum += f * 1e6
		}
		return sum, nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		var sum float64
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			v, err := one(ctx, m)
			mu.Lock()
			sum += v
			mu.Unlock()
			return err
		})
		return sum, err
	case *redis.Client:
		return one(ctx, c)
	default:
		return 0, fmt.Errorf("redis CPU: unsupported client %T", rdb)
	}
}

// redisCPUPer is Redis's process CPU (INFO cpu, every master) per unit between a and b, µs; -1
// when INFO cpu failed.
func redisCPUPer(a, b cost, units float64) float64 {
	if a.cpuErr != nil || b.cpuErr != nil || units <= 0 {
		return -1
	}
	return (b.redisCPUUs - a.redisCPUUs) / units
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
