package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/flagdown/flagdown/shared/metrics"
)

// ErrNotAnswering is the error of a command the client did not send because Redis left the last
// commands unanswered (see breaker).
var ErrNotAnswering = errors.New("redis is not answering: command not sent")

// Circuit breaker of every client Open builds (one per Redis node), on sony/gobreaker:
//   - when none of the node's commands was answered in the last breakerSilence and at least
//     breakerTrips went unanswered in it (a timeout, a refused or reset connection, a deadline
//     passed while waiting), the client stops sending: every command then fails at once with
//     ErrNotAnswering, so a request PostgreSQL decides pays the Redis timeout once per outage, not
//     once per Redis step, and a hung Redis is not sent a growing backlog. A Redis that is slow
//     but answers (a busy host) answers some commands in every such span and is never cut off;
//   - after breakerOpen one command is let through as a probe; its answer resumes sending, its
//     failure stops it for breakerOpen more;
//   - any answer is an answer: a missing key, a script or WRONGTYPE error count as success; a
//     caller that cancelled its context, or a closed client, count as neither.
const (
	breakerTrips   = 5
	breakerSilence = 2 * time.Second
	breakerOpen    = time.Second
)

// breaker is the go-redis hook holding one node's circuit breaker.
type breaker struct {
	cb *gobreaker.CircuitBreaker[struct{}]
}

// newBreaker returns the hook for the node at addr.
func newBreaker(addr string) *breaker {
	return &breaker{cb: gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         addr,
		MaxRequests:  1,
		Interval:     breakerSilence,
		BucketPeriod: breakerSilence / 8,
		Timeout:      breakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.TotalSuccesses == 0 && c.TotalFailures >= breakerTrips
		},
		IsSuccessful: func(err error) bool {
			return !unanswered(err)
		},
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed)
		},
		OnStateChange: func(name string, from, to gobreaker.State) {
			switch to {
			case gobreaker.StateOpen:
				if from == gobreaker.StateClosed {
					metrics.RedisBreakerOpened.Inc()
					slog.Warn("redis: commands unanswered; not sending any until a probe is answered", "redis", name,
						"after_unanswered", breakerTrips, "probe_every", breakerOpen.String())
				}
			case gobreaker.StateClosed:
				slog.Info("redis: a probe was answered; sending commands again", "redis", name)
			}
		},
	})}
}

// unanswered reports whether err means Redis gave no answer: a network error or timeout, a
// deadline passed while waiting, no pooled connection in time, a refused or reset connection.
func unanswered(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, net.ErrClosed) || err.Error() == "EOF"
}

// shortCircuited reports whether err is the breaker refusing to send (open, or a probe already
// under way).
func shortCircuited(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}

// DialHook is go-redis's dial hook, unchanged (a failed dial fails the command it was for).
func (b *breaker) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook runs one command through the breaker.
func (b *breaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		_, err := b.cb.Execute(func() (struct{}, error) { return struct{}{}, next(ctx, cmd) })
		if shortCircuited(err) {
			cmd.SetErr(ErrNotAnswering)
			return ErrNotAnswering
		}
		return err
	}
}

// ProcessPipelineHook runs one pipeline (or transaction) through the breaker, as one command.
func (b *breaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		_, err := b.cb.Execute(func() (struct{}, error) { return struct{}{}, next(ctx, cmds) })
		if shortCircuited(err) {
			for _, c := range cmds {
				c.SetErr(ErrNotAnswering)
			}
			return ErrNotAnswering
		}
		return err
	}
}
