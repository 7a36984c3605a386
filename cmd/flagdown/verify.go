package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/invariants"
	"github.com/flagdown/flagdown/shared/logging"
)

// defaultVerifyGrace is --grace's default: longer than any path the platform takes to make Redis
// follow a commit, act on a timeout or publish an event in a healthy deployment.
const defaultVerifyGrace = 10 * time.Second

// newVerifyCmd builds `flagdown verify`: the invariants of package shared/invariants checked
// against the deployment the environment names.
func newVerifyCmd() *cobra.Command {
	grace := defaultVerifyGrace
	asJSON := false
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check PostgreSQL and Redis against flagdown's invariants; exit status 1 on any violation",
		Long:  verifyHelp(),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grace < 0 {
				return errors.New("verify: --grace must be ≥ 0")
			}
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			rep, err := verifyDeployment(cmd.Context(), cfg, grace)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				err = enc.Encode(rep)
			} else {
				err = rep.Table(out)
			}
			if err != nil {
				return err
			}
			return violationsError(rep)
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", grace, "how long something only eventually true may stay wrong before it counts (Go duration)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON instead of the table")
	return cmd
}

// verifyDeployment opens PostgreSQL and Redis as cfg says and runs invariants.CheckDeployment
// with grace (the broker's two invariants too when NATS_URL is set).
func verifyDeployment(ctx context.Context, cfg *config.Config, grace time.Duration) (invariants.Report, error) {
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	d, err := host.Open(openCtx, cfg, logging.Discard())
	cancel()
	if err != nil {
		return invariants.Report{}, fmt.Errorf("verify: %w", err)
	}
	defer d.Close()
	rep, err := invariants.CheckDeployment(ctx, cfg, d.DB, d.Redis, grace)
	if err != nil {
		return invariants.Report{}, fmt.Errorf("verify: %w", err)
	}
	return rep, nil
}

// violationsError is nil when rep holds every invariant, else a one-line error naming the
// violated ones with their counts.
func violationsError(rep invariants.Report) error {
	if rep.Violations() == 0 {
		return nil
	}
	var parts []string
	for _, r := range rep.Results {
		if r.Count > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r.Name, r.Count))
		}
	}
	return fmt.Errorf("verify: %d invariant violations (%s)", rep.Violations(), strings.Join(parts, ", "))
}

// verifyHelp is the command's long help: what it reads, the grace, the exit status, and every
// invariant of invariants.All with what it counts.
func verifyHelp() string {
	var b strings.Builder
	b.WriteString(`Check a deployment's PostgreSQL (the truth) and Redis (its projection) against flagdown's
invariants, changing nothing, and print one row per invariant: its name, how many drivers, rides,
offers or events break it, and up to 10 example ids (--json: the same as JSON, with one
"invariant_<name>" count per invariant).

It connects as every flagdown command does: DATABASE_URL, FLAGDOWN_DB_SCHEMA, REDIS_URL,
FLAGDOWN_REDIS_PREFIX (or the secret files in FLAGDOWN_SECRETS_DIR). What is only eventually true
(Redis following a commit, a timeout being acted on, the relay publishing) counts only once it has
stayed wrong longer than --grace; ages use PostgreSQL's clock. The exit status is 0 when every count
is 0, and 1 on any violation or when the check could not run.

Invariants (every count must be 0):
`)
	for _, inv := range invariants.All {
		fmt.Fprintf(&b, "\n  %s (counts %s)\n", inv.Name, inv.Counts)
		b.WriteString(wrap(inv.Meaning, "      ", 100))
	}
	return strings.TrimRight(b.String(), "\n")
}

// wrap breaks s into lines of at most width characters (words longer than that stay whole), each
// starting with indent and ending with a newline.
func wrap(s, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, w := range strings.Fields(s) {
		if line != indent && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += w
	}
	if line != indent {
		b.WriteString(line + "\n")
	}
	return b.String()
}
