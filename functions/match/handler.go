// Package function is the match function: the thin handler over shared/matching. It decodes the
// event, lets matching (candidate search, scoring, the greedy and batch planners, the
// widen-the-search rule) and lifecycle (every state change) do the work, starts the push of a new
// offer to its driver, counts the outcome in metrics and answers it.
//
// Triggered by ride.requested, ride.offer.declined, ride.reopened, ride.offer.expired and ride.retry
// CloudEvents (subject = ride id), and match.batch.due (subject = batch name; see events.Triggers).
// In greedy mode a ride event is one match attempt (matching.Matcher.MatchRide: nearest available
// drivers by ring search in expanding radii, heartbeat and state filter, drivers already offered
// the ride excluded, ranking by dispatch.Score, the first offer lock won gets the offer, recorded by
// lifecycle.Service.Match with its ride.offered outbox row; nobody: the attempt is recorded, a retry
// timer armed, UNMATCHED past the retry budget). With FLAGDOWN_MATCH_MODE=batch a ride event only
// puts the ride into the city's batch, and the match.batch.due event of the closed window assigns
// the window's rides together (matching.Matcher.RunWindow). Each event is handled once per
// (source, id).
package function

import (
	"context"
	"net/http"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/matching"
	"github.com/flagdown/flagdown/shared/metrics"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/match"

// Consumer is this function's name in processed_events.
const Consumer = "match"

// Triggers are the event types that start a match.
var Triggers = events.TypesFor("match")

// Outcomes of one match (see lifecycle.Service.Match).
const (
	OutcomeOffered   = lifecycle.MatchOffered
	OutcomeNoDriver  = lifecycle.MatchNoDriver
	OutcomeDuplicate = lifecycle.MatchDuplicate
	OutcomeNotNeeded = lifecycle.MatchNotNeeded
	// OutcomeUnmatched: nobody could be offered within the retry budget; the ride is UNMATCHED.
	OutcomeUnmatched = lifecycle.MatchUnmatched
	// OutcomeJoined (batch mode): the ride joined the batch; its window's run will match it.
	OutcomeJoined = matching.OutcomeJoined
)

// Function matches rides to drivers.
type Function struct {
	d *app.Deps
	m *matching.Matcher
	h http.Handler
	// offerPushes holds one token per fast offer push in flight (MaxOfferPushesInFlight).
	offerPushes chan struct{}
}

// New returns the function over d.
func New(d *app.Deps) *Function {
	lc := d.Lifecycle(Source)
	f := &Function{d: d, m: matching.New(d.Redis, lc, d.Log, matching.ParamsFrom(d.Config)),
		offerPushes: make(chan struct{}, MaxOfferPushesInFlight)}
	f.h = host.EventHandler(d.Deps, Consumer, Triggers, f.Handle)
	return f
}

var lazy = app.NewLazy(func(d *app.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// ServeHTTP handles a CloudEvent delivered by a trigger.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.h.ServeHTTP(w, r) }

// Handle matches the ride named by the event's subject (matching.Matcher.MatchRide) and starts the
// push of a new offer to its driver (without waiting for it). It returns OutcomeOffered,
// OutcomeNoDriver, OutcomeUnmatched, OutcomeDuplicate (event already handled) or OutcomeNotNeeded
// (the ride is no longer REQUESTED, already has a live offer, or the event is a ride.retry issued
// before the ride's last match attempt); in batch mode a ride event instead puts the ride into the batch
// (OutcomeJoined). A match.batch.due event runs its window in either mode (RunBatch), so rides
// still waiting when the mode is switched back to greedy are matched.
func (f *Function) Handle(ctx context.Context, e event.Event) (outcome string, err error) {
	if e.Type() == events.MatchBatchDue {
		return f.RunBatch(ctx, e) // observes its rides' outcomes (observeBatch)
	}
	defer observeMatch(time.Now(), &outcome, &err)
	if err := dispatch.ValidateRideID("subject", e.Subject()); err != nil {
		return "", err
	}
	ref := &lifecycle.EventRef{Consumer: Consumer, Source: e.Source(), ID: e.ID()}
	if e.Type() == events.RideRetry {
		var data events.RideRetryData
		if err := cloudevent.DecodeData(e, &data); err != nil {
			return "", err
		}
		if data.Attempt < 0 {
			return "", dispatch.Invalid("data.attempt", "must be >= 0")
		}
		ref.RetryAttempt = &data.Attempt // a retry issued before the ride's last attempt is not needed
	}
	res, err := f.m.MatchRide(ctx, e.Subject(), ref)
	if err == nil && res.Offer != nil {
		f.pushOffer(ctx, *res.Offer, res.DriverID)
	}
	return res.Outcome, err
}

// RunBatch runs the window a match.batch.due event names (matching.Matcher.RunWindow) and answers
// its report as the outcome; OutcomeDuplicate when the window was run already.
func (f *Function) RunBatch(ctx context.Context, e event.Event) (string, error) {
	var data events.MatchBatchDueData
	if err := cloudevent.DecodeData(e, &data); err != nil {
		return "", err
	}
	if data.Batch == "" || data.Batch != e.Subject() {
		return "", dispatch.Invalid("data.batch", "must equal the event subject")
	}
	if data.DeadlineMs <= 0 {
		return "", dispatch.Invalid("data.deadline_ms", "must be > 0")
	}
	ref := &lifecycle.EventRef{Consumer: Consumer, Source: e.Source(), ID: e.ID()}
	start := time.Now()
	rep, dup, err := f.m.RunWindow(ctx, data.Batch, data.DeadlineMs, ref)
	observeBatch(start, rep, dup, err)
	if dup {
		return OutcomeDuplicate, err
	}
	return rep.String(), err
}

// observeMatch counts one handled ride event in metrics.MatchOutcomes and times it in
// metrics.MatchDuration under its outcome ("error" when it failed).
func observeMatch(start time.Time, outcome *string, err *error) {
	o := *outcome
	if *err != nil {
		o = "error"
	}
	metrics.MatchOutcomes.WithLabelValues(o).Inc()
	metrics.MatchDuration.WithLabelValues(o).Observe(metrics.Since(start))
}

// observeBatch counts the rides of one batch window run by their outcome in metrics.MatchOutcomes
// (the report's counts; "deferred" for rides left to the next window) and times the whole run in
// metrics.MatchDuration under "batch" ("duplicate" for a window run already, "error" when it
// failed). The report's text is never a label: it holds counts.
func observeBatch(start time.Time, rep matching.BatchReport, dup bool, err error) {
	for o, n := range map[string]int{
		OutcomeOffered: rep.Offered, OutcomeNoDriver: rep.NoDriver, "deferred": rep.Deferred,
		OutcomeUnmatched: rep.Unmatched, OutcomeNotNeeded: rep.NotNeeded, OutcomeDuplicate: rep.Duplicate,
	} {
		metrics.MatchOutcomes.WithLabelValues(o).Add(float64(n))
	}
	o := "batch"
	switch {
	case err != nil:
		o = "error"
	case dup:
		o = OutcomeDuplicate
	}
	metrics.MatchDuration.WithLabelValues(o).Observe(metrics.Since(start))
}
