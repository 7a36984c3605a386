//go:build !production

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/wsgateway"
	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/expiry"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/internalauth"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/outbox"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/push"
)

func newDevCmd() *cobra.Command {
	var addr, natsDir string
	var natsPort int
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the local platform: gateway, broker, triggers, outbox relay, expiry source, reconcile cron",
		Long: `Runs everything a cluster would, in one process: serves every function under
/function/<name> (the gateway), runs a NATS JetStream broker (embedded unless NATS_URL is set),
delivers events to functions through the trigger table in CloudEvents binary mode (ack on 2xx,
redelivery with backoff on 5xx, dead-letter at once on other 4xx and after
FLAGDOWN_TRIGGER_MAX_DELIVER attempts), runs the outbox
relay and the Redis expiry source, calls the reconcile function every FLAGDOWN_RECONCILE_INTERVAL,
creates the database DATABASE_URL names when it is missing (through the server's
maintenance database postgres) and applies migrations on start. Client tokens are verified with FLAGDOWN_JWT_SECRET (or
FLAGDOWN_JWKS_URL); with neither set a random secret is generated for the run, written to a file
only its owner may read (0600, in a 0700 folder, removed at exit) and that file's path logged with
the flagdown token command that mints tokens for it (the secret itself is never logged). The relay and the expiry source sign events with
FLAGDOWN_EVENT_SIGNING_KEY and the functions verify them with FLAGDOWN_EVENT_VERIFY_KEYS (a key pair
generated for the run when neither is set; the signing key's own public key when only it is set);
the cron and the WebSocket gateway authorize their calls with FLAGDOWN_INTERNAL_TOKEN, a random one
for the run when it is unset.
It also runs a local AWS API Gateway WebSocket API: phones connect to ws://<addr>/ws, functions push
through its management API at http://<addr>/local/@connections/ (FLAGDOWN_PUSH_ENDPOINT when unset),
signed with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (a random pair for the run when unset), and its
routes call the notify function's /function/notify/{connect,message,disconnect}. Traces go to the
OTLP endpoint of the OTEL_* environment when one is set (off by default). Stops gracefully on
SIGINT/SIGTERM.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("addr") || os.Getenv("FLAGDOWN_ADDR") == "" {
				cfg.Addr = addr
			}
			log := host.NewLogger(cfg)
			stopTracing, err := startTracing(cmd.Context(), "flagdown-dev", log)
			if err != nil {
				return err
			}
			defer stopTracing()
			if cfg.PprofAddr != "" {
				prof, err := startPprof(cfg.PprofAddr, log)
				if err != nil {
					return err
				}
				defer prof.Close()
			}
			p, err := startPlatformOn(cmd.Context(), cfg, natsDir, natsPort, log)
			if err != nil {
				return err
			}
			if cfg.PprofAddr != "" {
				enableContentionProfiles()
			}
			log.Info("flagdown dev ready", "gateway", "http://"+p.Addr(), "map", "http://"+p.Addr()+"/map", "broker", p.natsURL,
				"schema", p.deps.DB.Schema, "redis_prefix", cfg.RedisPrefix, "functions", len(functionSet))
			<-cmd.Context().Done()
			log.Info("shutting down")
			return p.Close()
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "gateway listen address (env FLAGDOWN_ADDR)")
	cmd.Flags().StringVar(&natsDir, "nats-store", "", "JetStream store folder of the embedded broker (default: a temporary folder)")
	cmd.Flags().IntVar(&natsPort, "nats-port", 0, "loopback port of the embedded broker (default: a free port)")
	return cmd
}

// platform is a running local platform.
type platform struct {
	deps     *app.Deps
	ln       net.Listener
	srv      *http.Server
	broker   *broker.Broker
	embedded *server.Server
	natsURL  string
	tmpDir   string
	// secretDir holds the token secret generated for the run (ensureTokenSecret); removed at Close.
	secretDir string
	// cancel ends the background work (triggers, relay, expiry source, reconcile cron), which bg
	// waits for; wg waits for the gateway's Serve.
	cancel context.CancelFunc
	bg     sync.WaitGroup
	wg     sync.WaitGroup
	log    *slog.Logger
	disp   *broker.Dispatcher
	push   *wsgateway.Gateway
}

// startPlatform opens the dependencies, migrates, starts the broker, the gateway on cfg.Addr, the
// triggers and the outbox relay. Close stops them in reverse order.
func startPlatform(ctx context.Context, cfg *config.Config, natsDir string, log *slog.Logger) (*platform, error) {
	return startPlatformOn(ctx, cfg, natsDir, 0, log)
}

// startPlatformOn is startPlatform with the embedded broker (when cfg.NATSURL is empty) storing under
// natsDir (a temporary folder when empty) and listening on 127.0.0.1:natsPort (a free port when 0).
func startPlatformOn(ctx context.Context, cfg *config.Config, natsDir string, natsPort int, log *slog.Logger) (*platform, error) {
	p := &platform{log: log}
	ok := false
	defer func() {
		if !ok {
			_ = p.Close()
		}
	}()
	var err error
	if p.secretDir, err = ensureTokenSecret(cfg, log); err != nil {
		return nil, err
	}
	signer, tokens, err := ensureInternalKeys(cfg, log)
	if err != nil {
		return nil, err
	}
	// The database DATABASE_URL names is created when missing (flagdown dev is the one command a new
	// user runs first); a deployment's functions never create it.
	if created, err := pgstore.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
		return nil, err
	} else if created {
		pc, _ := pgconn.ParseConfig(cfg.DatabaseURL) // EnsureDatabase parsed it already
		log.Info("created the database DATABASE_URL names", "database", pc.Database, "host", pc.Host)
	}
	// Listen first: the push endpoint and the integrations name the gateway's address.
	if p.ln, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, fmt.Errorf("gateway: listen on %s: %w", cfg.Addr, err)
	}
	mux := http.NewServeMux()
	var pushClient *push.Management
	if p.push, pushClient, err = startPushGateway(cfg, p.Addr(), tokens, mux, log); err != nil {
		return nil, err
	}
	if p.deps, err = app.Open(ctx, cfg, log); err != nil {
		return nil, err
	}
	p.deps.PushManagement = pushClient
	if err := p.deps.DB.Migrate(ctx); err != nil {
		return nil, err
	}
	p.natsURL = cfg.NATSURL
	if p.natsURL == "" {
		if natsDir == "" {
			if p.tmpDir, err = os.MkdirTemp("", "flagdown-nats-"); err != nil {
				return nil, err
			}
			natsDir = p.tmpDir
		}
		if p.embedded, p.natsURL, err = broker.StartEmbedded(natsDir, natsPort); err != nil {
			return nil, err
		}
	}
	if p.broker, err = broker.Connect(ctx, p.natsURL, cfg.NATSStream, cfg.SubjectPrefix, broker.WithCredentials(broker.ConfigCredentials(cfg))); err != nil {
		return nil, err
	}
	// The fleet gauges are read on scrape, by this long-running process only (never per function call).
	fleet := prometheus.NewRegistry()
	fleet.MustRegister(metrics.NewFleetCollector(p.deps.Fleet, 2*time.Second))
	mux.Handle("/", gateway(p.deps, fleet))
	p.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10, // as the function template: headers past 64 KiB answer 431
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := p.srv.Serve(p.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("gateway stopped", "err", err)
		}
	}()

	triggers := make([]broker.Trigger, 0, len(events.Triggers))
	for _, t := range events.Triggers {
		triggers = append(triggers, broker.Trigger{Name: t.Function, Types: t.Types, URL: "http://" + p.Addr() + "/function/" + t.Function})
	}
	if p.disp, err = broker.NewDispatcher(p.broker, triggers, cfg.TriggerMaxDeliver, nil, log,
		broker.WithUnavailableLimit(cfg.TriggerUnavailableLimit)); err != nil {
		return nil, err
	}
	relay := outbox.New(p.deps.DB, p.broker.Publish, outbox.Options{PollInterval: cfg.RelayPollInterval, Log: log, Keys: signer})
	// The functions run in this process: each commit that wrote an outbox row wakes the relay at
	// once; the poll stays for rows other processes commit.
	p.deps.DB.OnOutboxCommit(relay.Wake)
	expirySource := expiry.New(p.deps.Redis, p.broker.Publish, expiry.Options{SweepInterval: cfg.ExpirySweepInterval, Log: log, Keys: signer})
	reconcileCron := func(ctx context.Context) error {
		return cron(ctx, "http://"+p.Addr()+"/function/reconcile", cfg.ReconcileInterval, tokens, log)
	}
	for name, run := range map[string]func(context.Context) error{
		"triggers": p.disp.Run, "outbox relay": relay.Run, "expiry source": expirySource.Run, "reconcile cron": reconcileCron,
	} {
		p.bg.Add(1)
		go func() {
			defer p.bg.Done()
			if err := run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error(name+" stopped", "err", err)
			}
		}()
	}
	ok = true
	return p, nil
}

// ensureInternalKeys completes cfg's internal credentials for a flagdown dev run and returns the
// signer of its relay and expiry source and the token of its cron and gateway. With neither
// FLAGDOWN_EVENT_SIGNING_KEY nor FLAGDOWN_EVENT_VERIFY_KEYS set it generates a key pair for the run
// (nothing outside the process knows the private key, and cfg, which the in-process functions
// share, never holds it); with only the signing key set the functions
// accept its public key; verify keys without a signing key cannot sign anything the functions
// accept, and are refused. Without FLAGDOWN_INTERNAL_TOKEN a random token is used. Nothing secret is
// logged.
func ensureInternalKeys(cfg *config.Config, log *slog.Logger) (*internalauth.Signer, *internalauth.Tokens, error) {
	signer, err := internalauth.ParseSigner(cfg.EventSigningKey)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case !signer.Configured() && cfg.EventVerifyKeys != "":
		return nil, nil, fmt.Errorf("%s is set but %s is not: flagdown dev signs its own events; set both or neither",
			internalauth.VerifyKeysVariable, internalauth.SigningKeyVariable)
	case !signer.Configured():
		if signer, err = internalauth.GenerateSigner("dev-" + time.Now().UTC().Format("20060102T150405")); err != nil {
			return nil, nil, err
		}
		log.Info("no "+internalauth.SigningKeyVariable+" set: signing events with a key pair generated for this run", "key_id", signer.KeyID())
	}
	if cfg.EventVerifyKeys == "" {
		cfg.EventVerifyKeys = signer.VerifyKey()
	}
	if cfg.InternalToken == "" {
		cfg.InternalToken = internalauth.GenerateToken()
		log.Info("no " + internalauth.TokenVariable + " set: using a random internal token for this run")
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	tokens, err := internalauth.ParseTokens(cfg.InternalToken)
	return signer, tokens, err
}

// Addr is the gateway's listen address (host:port).
func (p *platform) Addr() string { return p.ln.Addr().String() }

// Close stops the WebSocket gateway (every socket closed, its disconnect integration called), the
// triggers, relay, expiry source and cron, then the gateway (draining requests), the broker and the
// pools. The triggers stop before the gateway: their last attempts reach a gateway that still
// serves, and what they have not delivered goes back to the broker, never to the dead-letter stream.
func (p *platform) Close() error {
	if p.push != nil {
		_ = p.push.Close()
		s := p.push.Stats()
		p.log.Info("websocket gateway", "accepted", s.Accepted, "refused", s.Refused, "open", s.Open,
			"closed", s.Closed, "posted", s.MessagesPosted, "received", s.MessagesReceived, "dropped", s.MessagesDropped)
	}
	if p.cancel != nil {
		p.cancel()
	}
	p.bg.Wait()
	if p.srv == nil && p.ln != nil {
		_ = p.ln.Close()
	}
	if p.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = p.srv.Shutdown(ctx)
		cancel()
	}
	p.wg.Wait()
	if p.disp != nil {
		s := p.disp.Stats()
		p.log.Info("triggers", "delivered", s.Delivered, "retried", s.Retried, "unavailable", s.Unavailable,
			"released", s.Released, "dead_lettered", s.DeadLettered)
	}
	if p.broker != nil {
		p.broker.Close()
	}
	if p.embedded != nil {
		p.embedded.Shutdown()
		p.embedded.WaitForShutdown()
	}
	if p.tmpDir != "" {
		_ = os.RemoveAll(p.tmpDir)
	}
	if p.secretDir != "" {
		_ = os.RemoveAll(p.secretDir)
	}
	if p.deps != nil {
		p.deps.Close()
	}
	return nil
}
