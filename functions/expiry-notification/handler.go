// Package function is the expiry-notification function: it turns Redis key expiries, published by
// the expiry source as io.flagdown.redis.key.expired.v1 CloudEvents (subject = the key), into the
// timeouts they mean:
//
//	P hb:{driver}     heartbeat expired  → driver offline (see lifecycle.DriverOffline)
//	P offertimer:{offer}  offer timer expired → that offer timed out, ride matched again without its driver
//	P offer:{driver}  offer lock indexed by an older version expired → his offers timed out
//	P retry:{ride}    retry timer fired  → ride matched again
//	P batch:{name}:{opened}  batch window closed → match.batch.due: the batch's rides assigned together
//
// Each handler re-reads state before acting (a ping a millisecond after the expiry wins), and each
// event has one effect per (source, id).
package function

import (
	"context"
	"net/http"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/expiry-notification"

// Consumer is this function's name in processed_events.
const Consumer = "expiry-notification"

// OutcomeIgnored: the key is not one of this deployment's timed keys.
const OutcomeIgnored = "ignored"

// Function handles expired-key events.
type Function struct {
	d  *host.Deps
	lc *lifecycle.Service
	h  http.Handler
}

// New returns the function over d.
func New(d *host.Deps) *Function {
	f := &Function{d: d, lc: d.Lifecycle(Source)}
	f.h = host.EventHandler(d, Consumer, events.TypesFor("expiry-notification"), f.Handle)
	return f
}

var lazy = host.NewLazy(func(d *host.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// ServeHTTP handles a CloudEvent delivered by a trigger.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.h.ServeHTTP(w, r) }

// Handle acts on one expired key. Outcomes: done, duplicate, stale (state moved on) or ignored.
func (f *Function) Handle(ctx context.Context, e event.Event) (string, error) {
	var data events.RedisKeyExpiredData
	if err := cloudevent.DecodeData(e, &data); err != nil {
		return "", err
	}
	if data.Key != e.Subject() {
		return "", dispatch.Invalid("data.key", "must equal the event subject")
	}
	kind, id, ok := redisstore.ParseTimedKey(f.d.Redis.Prefix(), e.Subject())
	if !ok {
		return OutcomeIgnored, nil
	}
	if data.DeadlineMs > 0 {
		metrics.TimerLateness.WithLabelValues(string(kind)).Observe(metrics.Since(time.UnixMilli(data.DeadlineMs)))
	}
	ref := &lifecycle.EventRef{Consumer: Consumer, Source: e.Source(), ID: e.ID()}
	var out lifecycle.Outcome
	var err error
	switch kind {
	case redisstore.KindHeartbeat:
		out, err = f.lc.DriverOffline(ctx, id, "heartbeat_expired", ref)
	case redisstore.KindOfferLock:
		out, err = f.lc.OfferTimedOut(ctx, id, ref)
	case redisstore.KindOfferTimer:
		out, err = f.lc.OfferTimerFired(ctx, id, ref)
	case redisstore.KindRetry:
		out, err = f.lc.RetryDue(ctx, id, "retry_timer", ref)
	case redisstore.KindBatch:
		name, ok := redisstore.BatchOfTimer(id)
		if !ok {
			return OutcomeIgnored, nil
		}
		deadline := data.DeadlineMs
		if deadline == 0 { // no indexed deadline (not armed by flagdown's script): name it by when it was seen
			deadline = data.ObservedAt.UnixMilli()
		}
		out, err = f.lc.BatchDue(ctx, name, deadline, ref)
	}
	return string(out), err
}
