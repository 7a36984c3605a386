// Command flagdown is the local platform and the tools around the function set:
//
//	flagdown dev            serve every function under /function/<name>; run the broker, triggers, outbox relay, expiry source and reconcile cron
//	flagdown migrate        apply the database migrations
//	flagdown replay         replay real NYC taxi trips against a running platform over HTTP
//	flagdown expiry-source  publish Redis timed-key expiries as events (flagdown dev runs one)
//	flagdown relay          publish outbox rows to the broker (flagdown dev runs one)
//	flagdown verify         check PostgreSQL and Redis against the invariants; exit status 1 on any violation
//	flagdown chaos          replay trips while killing and restarting the platform, Redis and the relay; check nothing was lost
//	flagdown cron           call an internal endpoint (reconcile) once with the internal credential
//	flagdown token          mint a client token (HS256 with FLAGDOWN_JWT_SECRET) for local use
//	flagdown bench          measure flagdown beside the raw ceilings of its Redis and PostgreSQL, as ratios (make bench)
//	flagdown keygen         write the event key pair and the internal token as secret files (mode 0600)
//	flagdown dead-letters   the Knative dead-letter sink: log what identifies each undeliverable event, never its data
//
// Built with -tags production (the images of deploy/docker/Dockerfile) it carries only the
// production commands: migrate, relay, expiry-source, cron, verify, keygen and dead-letters; dev, replay, chaos,
// token and bench are for development machines (commands_dev.go).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "flagdown",
		Short:         "flagdown ride-hailing dispatch: local platform and tools",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newMigrateCmd(), newExpirySourceCmd(), newRelayCmd(), newVerifyCmd(), newCronCmd(), newKeygenCmd(), newDeadLettersCmd())
	root.AddCommand(devCommands()...)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "flagdown:", err)
		os.Exit(1)
	}
}
