package ratelimit

import "time"

// Refusal is the CodeRateLimited error (as Allow's) of a budget of perMin units per minute, with a
// burst of as many, kept outside this Limiter (the ping budget lives in the driver hash, see
// redisstore.Store.PingsPerMin): it names field and asks to retry in wait (whole seconds, at least 1).
func Refusal(kind Kind, perMin int, field string, wait time.Duration) error {
	return refused(kind, perMin, time.Minute, field, wait)
}
