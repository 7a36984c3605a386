// Package app is the composition root of flagdown: the dependencies of shared/host (configuration,
// PostgreSQL, Redis, logger, auth, limiter, pricing, rules, lifecycle) plus push, the live
// connections over the API Gateway management API and the mobile fallback over Amazon SNS
// (shared/push, so the AWS SDK).
//
// Only cmd/ and the functions that push (the "pushes" list of internal/archtest: notify, devices,
// match, location-update) import it; a function that does not push takes *host.Deps and so links no
// push code, and nothing else under shared/ imports this package (internal/archtest fails the build
// otherwise).
package app

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/push"
)

// Deps are a process's dependencies with push: the host dependencies (embedded: Config, DB, Redis,
// Log, Auth, Rules and their methods) and the pusher and mobile fallback, built once on first use.
// Pass Deps.Deps to a function that does not push. They are safe for concurrent use.
type Deps struct {
	*host.Deps

	pushOnce sync.Once
	pusher   *push.Pusher
	snsOnce  sync.Once
	sns      *push.SNS
	// PushManagement, when set before the first Push call, is the management API client Push
	// uses instead of building one for FLAGDOWN_PUSH_ENDPOINT from the AWS credential chain
	// (flagdown dev hands its local gateway's).
	PushManagement *push.Management
	// PushSNS, when set before the first SNS call, is the mobile push fallback SNS returns instead
	// of building one from FLAGDOWN_SNS_* and the AWS credential chain.
	PushSNS *push.SNS
}

// With returns the Deps that add push to h (h is shared, not copied).
func With(h *host.Deps) *Deps { return &Deps{Deps: h} }

// SNS returns the process's mobile push fallback (push.NewSNS over FLAGDOWN_SNS_*), built once; it
// is off (Enabled false) when no platform application is configured or the AWS configuration
// cannot be loaded (logged).
func (d *Deps) SNS() *push.SNS {
	d.snsOnce.Do(func() {
		if d.PushSNS != nil {
			d.sns = d.PushSNS
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := push.NewSNS(ctx, d.Config, d.DB)
		if err != nil {
			d.Log.Error("mobile push fallback off", "err", err)
			s = nil
		}
		d.sns = s
	})
	return d.sns
}

// Push returns the process's pusher (shared/push), built once: the connection registry over its
// Redis and, when FLAGDOWN_PUSH_ENDPOINT is set, the management API client signed with the AWS
// credential chain, and the mobile fallback of SNS. With no endpoint (or when the credential chain
// cannot be loaded, which is logged) the pusher is off: Enabled is false and every Send delivers
// nothing.
func (d *Deps) Push() *push.Pusher {
	d.pushOnce.Do(func() {
		reg := push.NewRegistry(d.Redis.Client(), d.Config.RedisPrefix)
		gw := d.PushManagement
		if ep := d.Config.PushEndpoint; gw == nil && ep != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m, err := push.ManagementFromEnv(ctx, ep)
			if err != nil {
				d.Log.Error("push off: management API client", "endpoint", ep, "err", err)
			} else {
				gw = m
			}
		}
		var mob push.Mobile
		if s := d.SNS(); s.Enabled() {
			mob = s
		}
		d.pusher = push.NewPusher(reg, gw, mob, d.Log)
	})
	return d.pusher
}

// Open connects to PostgreSQL and Redis as cfg says (host.Open) and returns the Deps with push over
// them. A nil log is host.NewLogger(cfg).
func Open(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Deps, error) {
	h, err := host.Open(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	return With(h), nil
}

var (
	processMu   sync.Mutex
	processDeps *Deps
)

// Process returns the process-wide Deps with push, over the process-wide host dependencies
// (host.Process, so a process builds its pools once whichever package asks), building them on
// first use. A failed build is retried on the next call rather than cached.
func Process(ctx context.Context) (*Deps, error) {
	processMu.Lock()
	defer processMu.Unlock()
	if processDeps != nil {
		return processDeps, nil
	}
	h, err := host.Process(ctx)
	if err != nil {
		return nil, err
	}
	processDeps = With(h)
	return processDeps, nil
}

// NewLazy returns the OpenFaaS entry point of a function that pushes: a host.Lazy that calls build
// once the process Deps with push exist (Process).
func NewLazy(build func(*Deps) http.Handler) *host.Lazy[*Deps] { return host.LazyOver(Process, build) }
