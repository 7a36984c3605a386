// Package function is the reconcile function: the backstop for everything that is only a hint.
// Expired-key notifications can be lost (Pub/Sub drops them while the expiry source is away; a
// Redis restart forgets timers), so on a schedule (cron trigger; a ticker in flagdown dev) it
// rebuilds truth from PostgreSQL and Redis and repairs:
//
//	offers_expired        PENDING offers past their window (+ grace) → offer timed out, ride matched again
//	rides_retried         REQUESTED rides with no live offer, no retry timer, untouched for the grace → matched again
//	drivers_offline       available-set members without a heartbeat → offline
//	active_drivers_fixed  drivers PostgreSQL has on a ride but Redis shows available → state restored
//	active_drivers_offline drivers on a ride without a heartbeat → offline handling (ride re-opened or alert)
//	outbox_unpublished    outbox rows older than the grace still unpublished → relays woken
//
// Every repair is counted and logged. Each repair changes the state that made it necessary, so
// running reconcile twice in a row repairs nothing the second time.
//
// Any method is accepted (the OpenFaaS cron-connector POSTs; a Knative PingSource POSTs a
// CloudEvent whose content is ignored). The answer is the JSON of Report.
package function

import (
	"context"
	"net/http"

	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/reconcile"

// batch bounds the rows and keys handled per repair kind in one run.
const batch = 1000

// Function repairs state.
type Function struct {
	d  *app.Deps
	lc *lifecycle.Service
}

// New returns the function over d.
func New(d *app.Deps) *Function { return &Function{d: d, lc: lifecycle.New(d, Source)} }

var lazy = app.NewLazy(func(d *app.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// Report counts the repairs of one run.
type Report struct {
	OffersExpired        int `json:"offers_expired"`
	RidesRetried         int `json:"rides_retried"`
	DriversOffline       int `json:"drivers_offline"`
	ActiveDriversFixed   int `json:"active_drivers_fixed"`
	ActiveDriversOffline int `json:"active_drivers_offline"`
	OutboxUnpublished    int `json:"outbox_unpublished"`
}

// Total is the number of repairs.
func (r Report) Total() int {
	return r.OffersExpired + r.RidesRetried + r.DriversOffline + r.ActiveDriversFixed + r.ActiveDriversOffline + r.OutboxUnpublished
}

// ServeHTTP runs one reconcile pass and answers its Report.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rep, err := f.Run(r.Context())
	if err != nil {
		httpx.WriteError(w, r, f.d.Log, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, rep)
}

// Run performs one pass. It stops at the first dependency error (the next run resumes).
func (f *Function) Run(ctx context.Context) (Report, error) {
	var rep Report
	grace := f.d.Config.ReconcileGrace
	pool := f.d.DB.Pool

	// Offers whose timeout was missed.
	drivers, err := pgstore.DriversWithOverdueOffers(ctx, pool, grace, batch)
	if err != nil {
		return rep, err
	}
	for _, id := range drivers {
		out, err := f.lc.OfferTimedOut(ctx, id, nil)
		if err != nil {
			return rep, err
		}
		if out == lifecycle.OutcomeDone {
			rep.OffersExpired++
		}
	}

	// Available-set members whose heartbeat is gone.
	var cursor uint64
	for n := 0; n < batch; {
		ids, next, err := f.d.Redis.ScanAvailable(ctx, cursor, 500)
		if err != nil {
			return rep, err
		}
		alive, err := f.d.Redis.Heartbeats(ctx, ids)
		if err != nil {
			return rep, err
		}
		for i, id := range ids {
			if alive[i] {
				continue
			}
			out, err := f.lc.DriverOffline(ctx, id, "reconcile", nil)
			if err != nil {
				return rep, err
			}
			if out == lifecycle.OutcomeDone {
				rep.DriversOffline++
				n++
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}

	// Drivers on a ride: Redis must not show them available, and they must be alive.
	active, err := pgstore.ActiveAssignments(ctx, pool)
	if err != nil {
		return rep, err
	}
	for start := 0; start < len(active); start += 500 {
		chunk := active[start:min(start+500, len(active))]
		ids := make([]string, len(chunk))
		for i, a := range chunk {
			ids[i] = a.DriverID
		}
		inSet, err := f.d.Redis.InAvailable(ctx, ids)
		if err != nil {
			return rep, err
		}
		alive, err := f.d.Redis.Heartbeats(ctx, ids)
		if err != nil {
			return rep, err
		}
		for i, a := range chunk {
			switch {
			case !alive[i]:
				out, err := f.lc.DriverOffline(ctx, a.DriverID, "reconcile", nil)
				if err != nil {
					return rep, err
				}
				if out == lifecycle.OutcomeDone {
					rep.ActiveDriversOffline++
				}
			case inSet[i]:
				if err := f.d.Redis.RestoreOnRide(ctx, a.DriverID, a.RideID, a.Status); err != nil {
					return rep, err
				}
				rep.ActiveDriversFixed++
			}
		}
	}

	// REQUESTED rides nothing is working on (after the repairs above, which touch what they fix).
	rides, err := pgstore.IdleRequestedRides(ctx, pool, grace, batch)
	if err != nil {
		return rep, err
	}
	for _, id := range rides {
		armed, err := f.d.Redis.HasRetryTimer(ctx, id)
		if err != nil {
			return rep, err
		}
		if armed {
			continue
		}
		out, err := f.lc.RetryDue(ctx, id, "reconcile", nil)
		if err != nil {
			return rep, err
		}
		if out == lifecycle.OutcomeDone {
			rep.RidesRetried++
		}
	}

	// Outbox rows the relays left behind.
	if rep.OutboxUnpublished, err = pgstore.UnpublishedOutbox(ctx, pool, grace); err != nil {
		return rep, err
	}
	if rep.OutboxUnpublished > 0 {
		if err := f.d.DB.WakeRelays(ctx); err != nil {
			return rep, err
		}
	}
	if rep.Total() > 0 {
		f.d.Log.Warn("reconcile repaired state", "offers_expired", rep.OffersExpired, "rides_retried", rep.RidesRetried,
			"drivers_offline", rep.DriversOffline, "active_drivers_fixed", rep.ActiveDriversFixed,
			"active_drivers_offline", rep.ActiveDriversOffline, "outbox_unpublished", rep.OutboxUnpublished)
	}
	return rep, nil
}
