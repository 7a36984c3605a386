package replay

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/invariants"
	"github.com/flagdown/flagdown/shared/logging"
	"github.com/flagdown/flagdown/shared/push"
)

// VerifySettle is how long, beyond Options.VerifyGrace, the replay waits after its last request
// before it checks the invariants, so that what the last requests set in motion has landed.
const VerifySettle = 2 * time.Second

// DefaultVerifyGrace is the default Options.VerifyGrace (the default of `flagdown verify --grace`).
const DefaultVerifyGrace = 10 * time.Second

// waitBeforeVerify sleeps until VerifyGrace + VerifySettle after lastRequest, or until ctx ends
// (then it returns ctx.Err()).
func waitBeforeVerify(ctx context.Context, o Options, lastRequest time.Time, out io.Writer) error {
	wait := time.Until(lastRequest.Add(o.VerifyGrace + VerifySettle))
	if wait <= 0 {
		return nil
	}
	fmt.Fprintf(out, "waiting %.1f s (verify grace %s + %s) after the last request before checking the invariants…\n",
		wait.Seconds(), o.VerifyGrace, VerifySettle)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// verifyInto checks the platform's invariants (invariants.CheckDeployment with o.VerifyGrace: the
// broker's too when the configuration names NATS_URL) against the PostgreSQL, Redis and broker of
// o.VerifyConfig, or of config.Load() when it is nil, and records the
// counts in sum. When the check cannot run, sum.VerifyError says why and the error is returned.
func verifyInto(ctx context.Context, o Options, sum *Summary, out io.Writer) error {
	fail := func(err error) error {
		sum.VerifyError = err.Error()
		return fmt.Errorf("verify did not run: %w (pass --verify=false to replay without it)", err)
	}
	cfg := o.VerifyConfig
	if cfg == nil {
		var err error
		if cfg, err = config.Load(); err != nil {
			return fail(err)
		}
	}
	schema := cfg.DatabaseSchema
	if schema == "" {
		schema = "public" // what pgstore.Open uses
	}
	fmt.Fprintf(out, "checking the invariants in PostgreSQL schema %s and Redis prefix %q (grace %s)…\n",
		schema, cfg.RedisPrefix, o.VerifyGrace)
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	d, err := app.Open(openCtx, cfg, logging.Discard())
	cancel()
	if err != nil {
		return fail(err)
	}
	defer d.Close()
	rep, err := invariants.CheckDeployment(ctx, cfg, d.DB, d.Redis, o.VerifyGrace)
	if err != nil {
		return fail(err)
	}
	sum.setInvariants(rep)
	if sum.Push {
		n, err := push.NewRegistry(d.Redis.Client(), cfg.RedisPrefix).Count(ctx)
		if err != nil {
			return fail(err)
		}
		sum.PushConnectionsLeft = n
	}
	return nil
}

// invariantsError is nil unless sum records invariant violations, or (with push, when the replay
// ran the check itself) lost messages or connections left registered; then it names them.
func invariantsError(sum *Summary) error {
	if sum.VerifyViolations == 0 {
		// Only a replay that checked the platform itself (not a chaos run, which kills the platform
		// and wipes Redis, and with it the connection registry, on purpose) holds push to 0 lost.
		if sum.Push && sum.VerifyRan && (sum.PushMessagesLost > 0 || sum.PushConnectionsLeft > 0) {
			return fmt.Errorf("push: %d messages lost, %d connections left registered after every socket closed (both must be 0); lost: %s",
				sum.PushMessagesLost, sum.PushConnectionsLeft, strings.Join(sum.PushLostExamples, "; "))
		}
		return nil
	}
	var parts []string
	for _, inv := range invariants.All {
		if n := *sum.invariantFields()[inv.Name]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", inv.Name.Key(), n))
		}
	}
	return fmt.Errorf("%d invariant violations after the replay (%s): run `flagdown verify` against the platform for details",
		sum.VerifyViolations, strings.Join(parts, ", "))
}
