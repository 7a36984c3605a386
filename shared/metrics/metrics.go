// Package metrics is the one owner of flagdown's Prometheus metric families: every name, help text
// and label set is defined here once, registered on Registry, and served by Handler. Call sites only
// observe (Inc, Observe, Set); metrics never change behaviour.
//
// Labels are bounded: function and trigger names, status codes, outcome and result words, timer
// kinds, repair kinds and the deployment's city. Ride and driver ids are never labels.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// City is the value of the city label of the fleet gauges: a deployment serves one service area
// for now.
const City = "default"

// Registry holds every flagdown family plus the Go runtime and process collectors.
var Registry = prometheus.NewRegistry()

// latencyBuckets spans a cache hit (1 ms) to a slow cross-service call (10 s), in seconds.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// latenessBuckets spans a timer handled on time (10 ms late) to one a sweep caught a minute late.
var latenessBuckets = []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60}

var (
	// HTTPRequests counts answered requests per function and HTTP status code.
	HTTPRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_http_requests_total",
		Help: "HTTP requests answered, by function and status code.",
	}, []string{"function", "code"})
	// HTTPDuration is the time from a request's arrival to its answer, per function and status code.
	HTTPDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "flagdown_http_request_duration_seconds",
		Help:    "Time to answer an HTTP request, by function and status code.",
		Buckets: latencyBuckets,
	}, []string{"function", "code"})

	// MatchOutcomes counts rides the match function handled, by outcome (offered, no_driver,
	// unmatched, duplicate, not_needed, joined, error; deferred in a batch window).
	MatchOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_match_outcomes_total",
		Help: "Rides handled by match, by outcome (offered, no_driver, unmatched, duplicate, not_needed, joined, deferred, error).",
	}, []string{"outcome"})
	// MatchDuration is the time the match function takes for one ride event, by outcome, or for one
	// batch window run (outcome batch).
	MatchDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "flagdown_match_duration_seconds",
		Help:    "Time to handle one match event, by outcome (batch: one batch window run).",
		Buckets: latencyBuckets,
	}, []string{"outcome"})

	// MatchModeDecisions counts the choices of FLAGDOWN_MATCH_MODE=auto, by mode (greedy, batch)
	// and reason (lone, ample, scarce, slow, hold, dwell; see shared/matching Decide): one per area
	// and batch window, plus one per ride offered at once for having at most one candidate (lone).
	MatchModeDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_match_mode_decisions_total",
		Help: "Auto matching mode decisions, by mode (greedy, batch) and reason (lone, ample, scarce, slow, hold, dwell).",
	}, []string{"mode", "reason"})

	// OfferResponses counts offers closed by their driver or their window: accepted, declined,
	// timed_out.
	OfferResponses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_offer_responses_total",
		Help: "Offers closed, by result (accepted, declined, timed_out).",
	}, []string{"result"})

	// TimerLateness is how long after its deadline a timer was handled, per timer kind.
	TimerLateness = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "flagdown_timer_lateness_seconds",
		Help:    "Time from a timer's deadline to its handling by expiry-notification, by timer kind.",
		Buckets: latenessBuckets,
	}, []string{"kind"})

	// OutboxPublished counts outbox rows the relay published and marked.
	OutboxPublished = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flagdown_outbox_published_total",
		Help: "Outbox rows published to the broker by the relay.",
	})

	// TriggerDeliveries counts events a trigger's subscriber answered 2xx to, per trigger.
	TriggerDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_trigger_deliveries_total",
		Help: "Events delivered (answered 2xx) by trigger.",
	}, []string{"trigger"})
	// TriggerRetries counts failed delivery attempts scheduled again, each spending one of the
	// event's FLAGDOWN_TRIGGER_MAX_DELIVER attempts, per trigger.
	TriggerRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_trigger_retries_total",
		Help: "Failed delivery attempts (500 and other 5xx but 502/503/504, 408, broken connection) scheduled again, by trigger.",
	}, []string{"trigger"})
	// TriggerUnavailable counts delivery attempts a trigger's target answered unavailable (429, 502,
	// 503, 504, no connection, timeout), retried in place without spending an attempt, per trigger.
	TriggerUnavailable = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_trigger_unavailable_total",
		Help: "Delivery attempts the target answered unavailable (429, 502, 503, 504, no connection, timeout), retried without spending an attempt, by trigger.",
	}, []string{"trigger"})
	// TriggerReleased counts events handed back to the broker undelivered because the dispatcher
	// stopped, per trigger.
	TriggerReleased = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_trigger_released_total",
		Help: "Events handed back to the broker undelivered because the dispatcher stopped, by trigger.",
	}, []string{"trigger"})
	// TriggerDeadLetters counts events moved to the dead-letter stream, per trigger.
	TriggerDeadLetters = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_trigger_dead_letters_total",
		Help: "Events moved to the dead-letter stream, by trigger.",
	}, []string{"trigger"})

	// ReconcileRepairs counts what reconcile repaired, per kind (its response's counts).
	ReconcileRepairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_reconcile_repairs_total",
		Help: "Repairs made by reconcile, by kind.",
	}, []string{"kind"})

	// RideTimeouts counts rides a deadline acted on, by kind: pickup_overdue (an ACCEPTED ride not
	// started within FLAGDOWN_PICKUP_DEADLINE, re-opened), trip_overdue (an IN_PROGRESS ride past
	// FLAGDOWN_TRIP_CEILING, alerted with ride.overdue) and retry_budget (a REQUESTED ride whose
	// offers kept expiring or being declined until FLAGDOWN_RETRY_BUDGET was spent, UNMATCHED).
	RideTimeouts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_ride_timeouts_total",
		Help: "Rides a deadline acted on, by kind (pickup_overdue, trip_overdue, retry_budget).",
	}, []string{"kind"})

	// OfflineBrakeEngaged is 1 while the offline brake holds (an abnormal share of the city's
	// drivers lapsed together: nobody is taken offline), 0 otherwise; set by the expiry source at
	// every health mark.
	OfflineBrakeEngaged = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "flagdown_offline_brake_engaged",
		Help: "1 while the offline brake holds offline decisions (a mass lapse of drivers), else 0.",
	})

	// Pings counts location-update pings by result: applied, stale, gps_jump, rate_limited.
	Pings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_pings_total",
		Help: "Driver pings handled by location-update, by result (applied, stale, gps_jump, rate_limited).",
	}, []string{"result"})

	// HailPresses counts street-hail presses that reached pairing, by side (rider, driver) and
	// result: waiting, paired, a refusal's reason (hail_ambiguous, hail_driver_unavailable,
	// driver_busy, rider_has_open_ride, hail_far_from_last_ping, hail_last_ping_stale,
	// hail_gps_jump, hail_code_tries, ...) or error.
	HailPresses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_hail_presses_total",
		Help: "Street-hail presses that reached pairing, by side and result (waiting, paired, a refusal reason, error).",
	}, []string{"side", "result"})

	// SurgeMultiplier is the surge multiplier computed for each fare quote, by surge mode (shadow,
	// on): what shadow mode would have charged, what on mode charged.
	SurgeMultiplier = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "flagdown_surge_multiplier",
		Help:    "Surge multiplier computed per fare quote (a ratio, 1 = no surge), by surge mode (shadow, on).",
		Buckets: []float64{1, 1.1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 5},
	}, []string{"mode"})

	// PushMessages counts messages to phones by result: posted, gone, failed.
	PushMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_push_messages_total",
		Help: "Messages posted to phone connections, by result (posted, gone, failed; skipped: an offer's fast push from match not started because too many were in flight, left to notify).",
	}, []string{"result"})

	// PushPositionsShed counts driver positions the position lane shed instead of pushing, by reason
	// (queue_full: the oldest waiting made room for a newer one; late: it waited past its timeout).
	// Only positions are ever shed; offers and ride statuses never go through the lane.
	PushPositionsShed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_push_positions_shed_total",
		Help: "Driver position pushes shed by the position lane instead of pushed, by reason (queue_full, late).",
	}, []string{"reason"})

	// EventsRefused counts events a consumer refused before acting, by function and reason
	// (shared/internalauth: unsigned, malformed_signature, unknown_key, bad_signature, too_old,
	// future_time; not_configured when the function has no verification keys).
	EventsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_events_refused_total",
		Help: "Events refused by their signature or age before any effect, by function and reason.",
	}, []string{"function", "reason"})

	// RedisDegraded counts decisions taken without Redis because it did not answer within
	// FLAGDOWN_REDIS_TIMEOUT, by check: rate_limit (a budget enforced by the process's own limiter),
	// pricing (a ride priced at the base fare, multiplier 1.0, no quoted wait), ride_view (a ride
	// shown without its driver's live position or wait estimate), effects (a committed change's
	// Redis effects left to reconcile).
	RedisDegraded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flagdown_redis_degraded_total",
		Help: "Decisions taken without Redis (it did not answer in time), by check (rate_limit, pricing, ride_view, effects).",
	}, []string{"check"})
	// RedisBreakerOpened counts the times a process's Redis client stopped sending commands to a
	// node that answered none for a while (redisstore's circuit breaker; it sends again once a
	// probe is answered).
	RedisBreakerOpened = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flagdown_redis_breaker_opened_total",
		Help: "Times the Redis client stopped sending commands to a node that answered none for 2 s (it probes once a second).",
	})
	// RedisGenerations counts new Redis generations the expiry source's health mark saw: Redis
	// restarted without its data, was flushed, or a failover promoted a replica without the mark
	// (the first mark of a deployment counts too).
	RedisGenerations = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flagdown_redis_generations_total",
		Help: "New Redis generations seen (restart without data, flush, failover to a node without the health mark).",
	})
)

// Families are the names of every flagdown family this package defines, in the order of the
// Metrics table of docs/operations.md; the fleet gauges (FleetCollector) included.
var Families = []string{
	"flagdown_http_requests_total",
	"flagdown_http_request_duration_seconds",
	"flagdown_match_outcomes_total",
	"flagdown_match_duration_seconds",
	"flagdown_match_mode_decisions_total",
	"flagdown_offer_responses_total",
	"flagdown_timer_lateness_seconds",
	"flagdown_outbox_lag_seconds",
	"flagdown_outbox_published_total",
	"flagdown_trigger_deliveries_total",
	"flagdown_trigger_retries_total",
	"flagdown_trigger_unavailable_total",
	"flagdown_trigger_released_total",
	"flagdown_trigger_dead_letters_total",
	"flagdown_reconcile_repairs_total",
	"flagdown_ride_timeouts_total",
	"flagdown_offline_brake_engaged",
	"flagdown_pings_total",
	"flagdown_hail_presses_total",
	"flagdown_surge_multiplier",
	"flagdown_push_messages_total",
	"flagdown_push_positions_shed_total",
	"flagdown_events_refused_total",
	"flagdown_redis_degraded_total",
	"flagdown_redis_breaker_opened_total",
	"flagdown_redis_generations_total",
	"flagdown_available_drivers",
	"flagdown_open_rides",
}

// Collectors returns every family this package registers on Registry (not the fleet gauges,
// which a platform registers itself with FleetCollector).
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		HTTPRequests, HTTPDuration, MatchOutcomes, MatchDuration, MatchModeDecisions, OfferResponses, TimerLateness,
		OutboxPublished, TriggerDeliveries, TriggerRetries, TriggerUnavailable, TriggerReleased, TriggerDeadLetters, ReconcileRepairs,
		RideTimeouts, OfflineBrakeEngaged, Pings, HailPresses, SurgeMultiplier, PushMessages, PushPositionsShed, EventsRefused,
		RedisDegraded, RedisGenerations, RedisBreakerOpened,
	}
}

func init() {
	Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	Registry.MustRegister(Collectors()...)
	// Every check's series exists from the start, at 0, so an outage shows as a rise.
	for _, check := range []string{"rate_limit", "pricing", "ride_view", "effects"} {
		RedisDegraded.WithLabelValues(check)
	}
	// So do the position lane's shed counts (reasons: shared/push ShedQueueFull, ShedLate).
	for _, reason := range []string{"queue_full", "late"} {
		PushPositionsShed.WithLabelValues(reason)
	}
}

// Handler serves Registry and the extra gatherers (e.g. a platform's FleetCollector registry) in
// the Prometheus text format, for GET /metrics.
func Handler(extra ...prometheus.Gatherer) http.Handler {
	g := prometheus.Gatherers{Registry}
	g = append(g, extra...)
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Since returns the seconds elapsed since t, for Observe.
func Since(t time.Time) float64 { return time.Since(t).Seconds() }
