// Package function is the reconcile function: the backstop for everything that is only a hint.
// Expired-key notifications can be lost (Pub/Sub drops them while the expiry source is away; a
// Redis restart forgets timers) and a Redis effect applied after a commit can fail, so on a
// schedule (cron trigger; a ticker in flagdown dev) it rebuilds truth from PostgreSQL and Redis and
// repairs, through lifecycle.Service like every other state change:
//
//	redis_rebuilt           Redis's generation is not the one PostgreSQL recorded (it lost its data) →
//	                        without the grace: assignments repaired, PENDING offers' locks and timers
//	                        restored (offers_restored), retry timers of waiting rides re-armed
//	                        (retry_timers_rearmed, due in half a heartbeat TTL)
//	offers_expired          PENDING offers past their window (+ grace) → offer timed out, ride matched again
//	drivers_offline         available-set members whose heartbeat expired more than the grace ago → offline
//	assignments_repaired    drivers on whom Redis and PostgreSQL disagree, in both directions: PostgreSQL
//	                        says free but Redis says on a ride (and shows him on its live position), or
//	                        PostgreSQL says on a ride but Redis says free, on another ride or available →
//	                        Redis gets PostgreSQL's assignment, compare-and-set on its epoch
//	active_drivers_offline  drivers on a ride whose heartbeat expired more than the grace ago → offline
//	                        handling (ride re-opened or alert)
//	rides_retried           REQUESTED rides with no live offer, no retry timer, untouched for the grace → matched again
//	offer_locks_released    offer locks whose offer PostgreSQL holds decided for more than the grace (the
//	                        answer's Redis effects were lost) → released, compare-and-delete on the offer id
//	outbox_unpublished      outbox rows older than the grace still unpublished → relays woken
//
// and it acts on the deadlines of rides, which are PostgreSQL's (no timer to lose), counted apart
// from the repairs (they are outcomes of the rules, not damage):
//
//	pickups_overdue         ACCEPTED rides not started within FLAGDOWN_PICKUP_DEADLINE of their accept →
//	                        re-opened and matched again without their driver (ride.reopened, pickup_overdue)
//	trips_overdue           IN_PROGRESS rides running longer than FLAGDOWN_TRIP_CEILING since their start →
//	                        ride.overdue raised once per ride (an alert; the ride goes on)
//
// Last, it prunes:
//
//	pruned_*                processed events, published outbox rows and decided offers past their retention
//
// Every repair re-checks under the same guards as the normal path (the epoch for assignments, the
// row lock and status for rides and offers), and anything changed less than FLAGDOWN_RECONCILE_GRACE
// ago is left alone, so a run during a busy replay repairs nothing that was right and, in normal
// operation, reports zero repairs. Each repair changes the state that made it necessary, so running
// reconcile twice in a row repairs nothing the second time.
//
// Any method is accepted; the body is ignored. Every call must carry the internal credential,
// Authorization: Bearer <FLAGDOWN_INTERNAL_TOKEN> (shared/internalauth), sent by the cron trigger
// (flagdown dev's ticker, the flagdown-reconcile-cron CronJob of deploy/), or an administrator's
// client token of role admin (shared/auth) for a run on demand (an operator, role ops, views only); without either the answer is 401 (403 for a
// client token of another role) and nothing runs. The answer is the JSON of Report.
package function

import (
	"context"
	"errors"
	"net/http"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/reconcile"

// batch bounds the rows and keys handled per repair kind in one run.
const batch = 1000

// Function repairs state.
type Function struct {
	d  *host.Deps
	lc *lifecycle.Service
}

// New returns the function over d.
func New(d *host.Deps) *Function { return &Function{d: d, lc: d.Lifecycle(Source)} }

var lazy = host.NewLazy(func(d *host.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// Report counts the repairs of one run, and what retention pruned.
type Report struct {
	OffersExpired        int `json:"offers_expired"`
	DriversOffline       int `json:"drivers_offline"`
	AssignmentsRepaired  int `json:"assignments_repaired"`
	ActiveDriversOffline int `json:"active_drivers_offline"`
	RidesRetried         int `json:"rides_retried"`
	// OfferLocksReleased counts offer locks released because PostgreSQL holds their offer decided.
	OfferLocksReleased int `json:"offer_locks_released"`
	OutboxUnpublished  int `json:"outbox_unpublished"`
	// RedisRebuilt is 1 when this run found a Redis generation other than the one PostgreSQL
	// recorded (Redis restarted empty, was flushed, or is another server) and rebuilt what Redis
	// must hold from PostgreSQL; OffersRestored and RetryTimersRearmed count what that rebuild
	// put back (its assignments count in AssignmentsRepaired).
	RedisRebuilt       int `json:"redis_rebuilt"`
	OffersRestored     int `json:"offers_restored"`
	RetryTimersRearmed int `json:"retry_timers_rearmed"`
	// PickupsOverdue and TripsOverdue count the ride deadlines acted on (not repairs).
	PickupsOverdue int `json:"pickups_overdue"`
	TripsOverdue   int `json:"trips_overdue"`
	// Pruned* count rows deleted by retention (not repairs).
	PrunedProcessedEvents int64 `json:"pruned_processed_events"`
	PrunedOutbox          int64 `json:"pruned_outbox"`
	PrunedOffers          int64 `json:"pruned_offers"`
}

// observeRepairs adds a run's repairs to metrics.ReconcileRepairs, one kind per Report field (its
// JSON name).
func observeRepairs(rep *Report) {
	for kind, n := range map[string]int{
		"offers_expired": rep.OffersExpired, "drivers_offline": rep.DriversOffline,
		"assignments_repaired": rep.AssignmentsRepaired, "active_drivers_offline": rep.ActiveDriversOffline,
		"rides_retried": rep.RidesRetried, "outbox_unpublished": rep.OutboxUnpublished,
		"offer_locks_released": rep.OfferLocksReleased, "offers_restored": rep.OffersRestored,
		"retry_timers_rearmed": rep.RetryTimersRearmed, "redis_rebuilt": rep.RedisRebuilt,
	} {
		metrics.ReconcileRepairs.WithLabelValues(kind).Add(float64(n))
	}
}

// Total is the number of repairs (pruning is not a repair).
func (r Report) Total() int {
	return r.OffersExpired + r.DriversOffline + r.AssignmentsRepaired + r.ActiveDriversOffline + r.RidesRetried +
		r.OutboxUnpublished + r.OfferLocksReleased + r.OffersRestored + r.RetryTimersRearmed
}

// ServeHTTP checks the caller, then runs one reconcile pass and answers its Report. Callers: the
// cron trigger with the internal credential (Authorization: Bearer <FLAGDOWN_INTERNAL_TOKEN>), or
// an administrator on demand with a client token of role admin. Anything else answers 401 unauthenticated
// (403 permission_denied for a valid client token of another role; 503 when neither credential is
// configured).
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := f.d.InternalTokens().VerifyRequest(r); err != nil {
		if adminErr := f.operator(r); adminErr != nil {
			if dispatch.ErrorCode(adminErr) == dispatch.CodePermissionDenied {
				err = adminErr
			}
			httpx.WriteError(w, r, f.d.Log, err)
			return
		}
	}
	rep, err := f.Run(r.Context())
	if err != nil {
		httpx.WriteError(w, r, f.d.Log, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, rep)
}

// operator reports whether r carries a valid client token of role admin: nil when it does,
// permission_denied for a valid token of another role, another error otherwise.
func (f *Function) operator(r *http.Request) error {
	if f.d.Auth == nil {
		return dispatch.Unavailable("identity verification", errors.New("no key source"))
	}
	tok, err := auth.BearerToken(r)
	if err != nil {
		return err
	}
	id, err := f.d.Auth.Verify(tok)
	if err != nil {
		return err
	}
	if id.Role != auth.RoleAdmin {
		return dispatch.PermissionDenied("role", "must be admin to run reconcile on demand")
	}
	return nil
}

// Run performs one pass, step by step in the order of the package comment. A step that fails (a
// dependency error) is skipped and the steps after it still run, so Redis being away does not hold
// back what PostgreSQL alone decides (the ride deadlines, the relays, retention); the failed steps
// are logged once per run. The error joins every failed step's (the first one's code is the
// answer's status); the next run resumes the failed steps.
func (f *Function) Run(ctx context.Context) (Report, error) {
	var rep Report
	steps := []struct {
		name string
		run  func(context.Context, *Report) error
	}{
		{"redis_rebuilt", f.rebuildAfterDataLoss},
		{"offers_expired", f.expireOverdueOffers}, {"drivers_offline", f.offlineWithoutHeartbeat},
		{"assignments_repaired", f.repairAssignments}, {"active_drivers_offline", f.activeWithoutHeartbeat},
		{"rides_retried", f.retryIdleRides}, {"offer_locks_released", f.releaseDecidedOfferLocks},
		{"outbox_unpublished", f.wakeRelays}, {"pickups_overdue", f.pickupsOverdue}, {"trips_overdue", f.tripsOverdue},
		{"prune", f.prune},
	}
	defer observeRepairs(&rep) // a failed run's repairs happened too
	var errs []error
	var failed []string
	for _, step := range steps {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		if err := step.run(ctx, &rep); err != nil {
			failed = append(failed, step.name)
			errs = append(errs, err)
		}
	}
	if len(failed) > 0 {
		f.d.Log.Warn("reconcile: steps failed; the next run resumes them", "steps", failed, "err", errs[0])
	}
	if rep.Total() > 0 {
		f.d.Log.Warn("reconcile repaired state", "offers_expired", rep.OffersExpired, "drivers_offline", rep.DriversOffline,
			"assignments_repaired", rep.AssignmentsRepaired, "active_drivers_offline", rep.ActiveDriversOffline,
			"rides_retried", rep.RidesRetried, "offer_locks_released", rep.OfferLocksReleased, "outbox_unpublished", rep.OutboxUnpublished,
			"offers_restored", rep.OffersRestored, "retry_timers_rearmed", rep.RetryTimersRearmed)
	}
	if rep.PickupsOverdue+rep.TripsOverdue > 0 {
		f.d.Log.Warn("reconcile acted on ride deadlines", "pickups_overdue", rep.PickupsOverdue, "trips_overdue", rep.TripsOverdue)
	}
	return rep, errors.Join(errs...)
}

// rebuildAfterDataLoss rebuilds what Redis must hold from PostgreSQL when Redis's generation
// (redisstore.Store.Generation) is not the one PostgreSQL recorded: Redis lost this prefix's data
// (restarted empty, flushed). What is missing then is not in flight, so the grace does not apply:
// every assignment is repaired, every PENDING offer gets its lock and timer back at its own
// deadline, and every REQUESTED ride without an offer or timer gets its retry timer back, due in
// half a heartbeat TTL (a live driver pings at least that often, so the GEO index has been
// re-filled when it fires; matching at once would offer the few drivers who pinged first or find
// nobody). The new generation is recorded only once the rebuild succeeded, so a failed one is
// tried again next run; a deployment's first run only records it. At most batch rows of each kind
// are rebuilt; the rest falls to the repairs after the grace.
func (f *Function) rebuildAfterDataLoss(ctx context.Context, rep *Report) error {
	gen, err := f.d.Redis.Generation(ctx)
	if err != nil {
		return err
	}
	prefix := f.d.Redis.Prefix()
	known, ok, err := pgstore.RedisGeneration(ctx, f.d.DB.Pool, prefix)
	if err != nil || (ok && known == gen) {
		return err
	}
	if ok {
		if err := f.rebuild(ctx, rep); err != nil {
			return err
		}
		rep.RedisRebuilt = 1
		f.d.Log.Warn("reconcile: Redis lost its data (a new generation); rebuilt it from PostgreSQL",
			"generation", gen, "recorded_generation", known, "assignments_repaired", rep.AssignmentsRepaired,
			"offers_restored", rep.OffersRestored, "retry_timers_rearmed", rep.RetryTimersRearmed)
	}
	return pgstore.RecordRedisGeneration(ctx, f.d.DB.Pool, prefix, gen)
}

// rebuild is rebuildAfterDataLoss's work: assignments, pending offers, retry timers.
func (f *Function) rebuild(ctx context.Context, rep *Report) error {
	n, err := f.lc.RepairAssignments(ctx, 0)
	rep.AssignmentsRepaired += n
	if err != nil {
		return err
	}
	offers, err := pgstore.PendingOffers(ctx, f.d.DB.Pool, batch)
	if err != nil {
		return err
	}
	for _, o := range offers {
		if _, err := f.d.Redis.RestoreOffer(ctx, o.DriverID, o.Offer, o.Remaining); err != nil {
			return err
		}
		rep.OffersRestored++
	}
	rides, err := pgstore.IdleRequestedRides(ctx, f.d.DB.Pool, 0, batch)
	if err != nil || len(rides) == 0 {
		return err
	}
	_, timers, err := f.d.Redis.RetryTimers(ctx, rides)
	if err != nil {
		return err
	}
	for i, id := range rides {
		if timers[i].Armed {
			continue
		}
		if err := f.d.Redis.SetRetryTimer(ctx, id, "rebuild", f.d.Config.HeartbeatTTL/2); err != nil {
			return err
		}
		rep.RetryTimersRearmed++
	}
	return nil
}

// expireOverdueOffers times out PENDING offers whose timeout was missed.
func (f *Function) expireOverdueOffers(ctx context.Context, rep *Report) error {
	drivers, err := pgstore.DriversWithOverdueOffers(ctx, f.d.DB.Pool, f.d.Config.ReconcileGrace, batch)
	if err != nil {
		return err
	}
	for _, id := range drivers {
		out, err := f.lc.OfferTimedOut(ctx, id, nil)
		if err != nil {
			return err
		}
		if out == lifecycle.OutcomeDone {
			rep.OffersExpired++
		}
	}
	return nil
}

// offlineWithoutHeartbeat takes available-set members whose heartbeat is gone offline.
func (f *Function) offlineWithoutHeartbeat(ctx context.Context, rep *Report) error {
	var cursor uint64
	for n := 0; n < batch; {
		ids, next, err := f.d.Redis.ScanAvailable(ctx, cursor, 500)
		if err != nil {
			return err
		}
		gone, err := f.d.Redis.HeartbeatsGone(ctx, ids, f.d.Config.ReconcileGrace)
		if err != nil {
			return err
		}
		for i, id := range ids {
			if !gone[i] {
				continue
			}
			out, err := f.lc.DriverOffline(ctx, id, "reconcile", nil)
			if err != nil {
				return err
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
	return nil
}

// releaseDecidedOfferLocks releases the offer locks whose offer PostgreSQL holds decided for more
// than the grace (the accept, decline or timeout committed, its Redis effects lost), each
// compare-and-delete on its offer id and with the available-set rule re-applied, as the answer's own
// effects would have. A lock whose offer PostgreSQL does not hold is left to its deadline.
func (f *Function) releaseDecidedOfferLocks(ctx context.Context, rep *Report) error {
	locks, err := f.d.Redis.OfferLocks(ctx)
	if err != nil || len(locks) == 0 {
		return err
	}
	driverOf := make(map[string]string, len(locks))
	ids := make([]string, 0, len(locks))
	for _, l := range locks {
		if l.Offer.OfferID != "" {
			driverOf[l.Offer.OfferID] = l.DriverID
			ids = append(ids, l.Offer.OfferID)
		}
	}
	decided, err := pgstore.DecidedOffers(ctx, f.d.DB.Pool, ids, f.d.Config.ReconcileGrace)
	if err != nil || len(decided) == 0 {
		return err
	}
	for _, id := range decided {
		released, err := f.d.Redis.ReleaseOffer(ctx, driverOf[id], id, true)
		if err != nil {
			return err
		}
		if released {
			rep.OfferLocksReleased++
		}
	}
	return nil
}

// repairAssignments makes Redis hold PostgreSQL's assignment where the two disagree.
func (f *Function) repairAssignments(ctx context.Context, rep *Report) error {
	n, err := f.lc.RepairAssignments(ctx, f.d.Config.ReconcileGrace)
	rep.AssignmentsRepaired += n
	return err
}

// activeWithoutHeartbeat runs the offline handling for drivers on a ride whose heartbeat is gone.
func (f *Function) activeWithoutHeartbeat(ctx context.Context, rep *Report) error {
	active, err := pgstore.ActiveAssignments(ctx, f.d.DB.Pool)
	if err != nil {
		return err
	}
	for start := 0; start < len(active); start += 500 {
		chunk := active[start:min(start+500, len(active))]
		ids := make([]string, len(chunk))
		for i, a := range chunk {
			ids[i] = a.DriverID
		}
		gone, err := f.d.Redis.HeartbeatsGone(ctx, ids, f.d.Config.ReconcileGrace)
		if err != nil {
			return err
		}
		for i, a := range chunk {
			if !gone[i] {
				continue
			}
			out, err := f.lc.DriverOffline(ctx, a.DriverID, "reconcile", nil)
			if err != nil {
				return err
			}
			if out == lifecycle.OutcomeDone {
				rep.ActiveDriversOffline++
			}
		}
	}
	return nil
}

// retryIdleRides asks for another match of REQUESTED rides nothing is working on (after the
// repairs above, which touch what they fix).
func (f *Function) retryIdleRides(ctx context.Context, rep *Report) error {
	rides, err := pgstore.IdleRequestedRides(ctx, f.d.DB.Pool, f.d.Config.ReconcileGrace, batch)
	if err != nil {
		return err
	}
	if len(rides) == 0 {
		return nil
	}
	_, timers, err := f.d.Redis.RetryTimers(ctx, rides) // pipelined: one round trip per 500 rides
	if err != nil {
		return err
	}
	for i, id := range rides {
		if timers[i].Armed {
			continue // its timer (or its batch window) will match it
		}
		out, err := f.lc.RetryDue(ctx, id, "reconcile", nil)
		if err != nil {
			return err
		}
		if out == lifecycle.OutcomeDone {
			rep.RidesRetried++
		}
	}
	return nil
}

// pickupsOverdue re-opens the ACCEPTED rides not started within the pickup deadline.
func (f *Function) pickupsOverdue(ctx context.Context, rep *Report) error {
	deadline := f.d.Config.PickupDeadline
	if deadline <= 0 {
		return nil
	}
	rides, err := pgstore.OverdueRides(ctx, f.d.DB.Pool, dispatch.RideAccepted, deadline, nil, batch)
	if err != nil {
		return err
	}
	for _, id := range rides {
		out, err := f.lc.PickupOverdue(ctx, id)
		if err != nil {
			return err
		}
		if out == lifecycle.OutcomeDone {
			rep.PickupsOverdue++
		}
	}
	return nil
}

// tripsOverdue raises ride.overdue for the IN_PROGRESS rides past the trip ceiling that have not
// had it yet (their alert's outbox row, by its fixed id, is looked up first).
func (f *Function) tripsOverdue(ctx context.Context, rep *Report) error {
	ceiling := f.d.Config.TripCeiling
	if ceiling <= 0 {
		return nil
	}
	rides, err := pgstore.OverdueRides(ctx, f.d.DB.Pool, dispatch.RideInProgress, ceiling, nil, batch)
	if err != nil || len(rides) == 0 {
		return err
	}
	ids := make([]string, len(rides))
	for i, id := range rides {
		ids[i] = lifecycle.TripOverdueEventID(id)
	}
	alerted, err := pgstore.OutboxEventsExist(ctx, f.d.DB.Pool, ids)
	if err != nil {
		return err
	}
	for i, id := range rides {
		if alerted[ids[i]] {
			continue
		}
		out, err := f.lc.TripOverdue(ctx, id)
		if err != nil {
			return err
		}
		if out == lifecycle.OutcomeDone {
			rep.TripsOverdue++
		}
	}
	return nil
}

// wakeRelays wakes the relays when outbox rows are left unpublished past the grace.
func (f *Function) wakeRelays(ctx context.Context, rep *Report) error {
	var err error
	if rep.OutboxUnpublished, err = pgstore.UnpublishedOutbox(ctx, f.d.DB.Pool, f.d.Config.ReconcileGrace); err != nil {
		return err
	}
	if rep.OutboxUnpublished > 0 {
		return f.d.DB.WakeRelays(ctx)
	}
	return nil
}

// prune deletes what is past its retention (FLAGDOWN_RETAIN_*), a bounded amount per run.
func (f *Function) prune(ctx context.Context, rep *Report) error {
	c := f.d.Config
	pr, err := f.d.DB.Prune(ctx, pgstore.Retention{ProcessedEvents: c.RetainProcessedEvents, Outbox: c.RetainOutbox, Offers: c.RetainOffers})
	rep.PrunedProcessedEvents, rep.PrunedOutbox, rep.PrunedOffers = pr.ProcessedEvents, pr.Outbox, pr.Offers
	return err
}
