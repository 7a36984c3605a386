package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/flagdown/flagdown/shared/invariants"
)

// Percentile returns the nearest-rank p-th percentile (p in 0..100) of samples: the smallest sample
// such that at least p % of the samples are ≤ it (rank ⌈p/100 × n⌉, at least 1). It returns 0 for no
// samples and ignores NaN samples. samples is not modified. The unit is the samples' unit.
func Percentile(samples []float64, p float64) float64 {
	s := make([]float64, 0, len(samples))
	for _, v := range samples {
		if !math.IsNaN(v) {
			s = append(s, v)
		}
	}
	if len(s) == 0 {
		return 0
	}
	sort.Float64s(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = max(1, min(rank, len(s)))
	return s[rank-1]
}

// Mean returns the arithmetic mean of samples (NaN ignored), 0 when there are none.
func Mean(samples []float64) float64 {
	var sum float64
	var n int
	for _, v := range samples {
		if !math.IsNaN(v) {
			sum += v
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// Matching modes of the platform (FLAGDOWN_MATCH_MODE), as the summary names them.
const (
	// MatchModeGreedy: each ride is offered on its own to its best-scoring available driver
	// (shared/matching, nearest first).
	MatchModeGreedy = "greedy"
	// MatchModeBatch: the rides to match within FLAGDOWN_BATCH_WINDOW are assigned together at the
	// least total score (shared/matching, dispatch.Assign).
	MatchModeBatch = "batch"
	// MatchModeAuto: per area and window, greedy while supply is ample and batch while it is scarce
	// (shared/matching, Decide).
	MatchModeAuto = "auto"
)

// DefaultSkipMinutes is the default of Options.SkipMinutes (--skip-minutes). On the demo file
// (testdata/trips.csv, pickups 00:00–00:56 of New Year's night 2013) the window then opens at 00:20:
// 1,289 trips ended before it (estimated dropoff time) and give the drivers' starts, and the default
// 20-minute window still holds 4,861 trips. Skipping 10 minutes leaves only 202 such trips (2,000
// drivers piled on them); skipping 30 leaves 3,183 but a window whose demand the file under-counts
// (its rows were cut by dropoff time, so trips still running at 00:56 are missing: see
// testdata/README.md).
const DefaultSkipMinutes = 20

// SurgeMinute is the distribution of the multipliers quoted in one simulated minute.
type SurgeMinute struct {
	// Minute is the simulated minute since the window opened (0 is the first).
	Minute int `json:"minute"`
	// Quotes is the rides ordered at a quote in that minute.
	Quotes int `json:"quotes"`
	// ChargedP50, ChargedMax: median and largest multiplier charged.
	ChargedP50 float64 `json:"charged_p50"`
	ChargedMax float64 `json:"charged_max"`
	// ComputedP50, ComputedMax: median and largest computed multiplier of the pickup cells.
	ComputedP50 float64 `json:"computed_p50"`
	ComputedMax float64 `json:"computed_max"`

	charged, computed []float64
}

// Summary is what a replay measured; it is written as JSON to --summary and printed as a table.
// Ride counts refer to rides this replay created; "simulated" durations are replay time (wall × speedup).
// Everything is measured through the HTTP API: ping answers, action answers and, at the end, one GET
// /function/ride/{id} per ride (the "final GET"; skipped when the replay is interrupted).
type Summary struct {
	// MatchMode is the platform's matching mode the figures were measured with (MatchModeGreedy or
	// MatchModeBatch), as the replay was told (Options.MatchMode): it cannot observe it.
	MatchMode string `json:"match_mode"`
	// DriverStarts is where the simulated drivers started (a DriverStarts value: "dropoffs-before",
	// the default, or "replay-pickups", optimistic).
	DriverStarts string `json:"driver_starts"`
	// DriverStartTripsBefore is how many trips that ended before the window gave their dropoff as a
	// candidate start (driver_starts "dropoffs-before"; 0 otherwise).
	DriverStartTripsBefore int `json:"driver_start_trips_before"`
	// DriverStartTripsFallback is how many trips picked up outside the window gave their dropoff as a
	// candidate start because none ended before it (driver_starts "dropoffs-before"; 0 otherwise).
	DriverStartTripsFallback int `json:"driver_start_trips_fallback"`

	// RidesRequested is how many order-create calls the platform accepted (202, or 200 on an idempotent replay).
	RidesRequested int `json:"rides_requested"`
	// RidesRejected is how many trips the platform refused with a 4xx answer.
	RidesRejected int `json:"rides_rejected"`
	// RejectedExamples are the first few rejection messages (status and error message).
	RejectedExamples []string `json:"rejected_examples"`
	// RidesOffered is how many requested rides got at least one offer seen by a simulated driver.
	RidesOffered int `json:"rides_offered"`
	// RidesAccepted is how many rides a simulated driver accepted successfully (200 on accept) at
	// least once.
	RidesAccepted int `json:"rides_accepted"`
	// RidesMatched is how many rides' latest accept stuck: accepted, not abandoned by a driver who
	// dropped offline, and not back to REQUESTED or UNMATCHED in the final GET. Without drivers going
	// offline or re-opened rides it equals RidesAccepted.
	RidesMatched int `json:"rides_matched"`
	// RidesCompleted is how many rides were completed (200 on complete) before the replay ended.
	RidesCompleted int `json:"rides_completed"`
	// MatchRate is RidesMatched / RidesRequested, 0..1 (0 when nothing was requested).
	MatchRate float64 `json:"match_rate"`
	// RidesUnmatched is how many rides the platform gave up on: final GET status UNMATCHED (its retry
	// budget ran out with nobody accepting). 0 when the final GET did not run.
	RidesUnmatched int `json:"rides_unmatched"`
	// RidesNeverMatched is how many rides were still waiting for a driver at the end: final GET status
	// REQUESTED (never accepted, or re-opened and not accepted again; the platform may still match or
	// give up on them later). 0 when the final GET did not run.
	RidesNeverMatched int `json:"rides_never_matched"`
	// FinalStatusKnown is true when the final GET of every ride ran to the end (RideFetchErrors may
	// still be > 0); the figures taken from it are otherwise partial or 0.
	FinalStatusKnown bool `json:"final_status_known"`
	// OffersTotal is the number of distinct offer ids the drivers saw.
	OffersTotal int `json:"offers_total"`
	// Declines is how many decline calls the platform answered 200.
	Declines int `json:"declines"`
	// DeclineConflicts is how many decline calls were answered 409 (offer already gone).
	DeclineConflicts int `json:"decline_conflicts"`
	// AcceptConflicts is how many accept calls were answered 409 (offer_expired, ride_taken, not_your_offer).
	AcceptConflicts int `json:"accept_conflicts"`
	// AcceptConflictReasons counts AcceptConflicts by the error's reason.
	AcceptConflictReasons map[string]int `json:"accept_conflict_reasons"`
	// TransitionConflicts is how many start/complete calls were answered 409.
	TransitionConflicts int `json:"transition_conflicts"`

	// OffersIgnored is how many offers a simulated driver left unanswered: the no-answer draw
	// (NoAnswerProb), or he dropped offline holding the offer.
	OffersIgnored int `json:"offers_ignored"`
	// OfferTimeouts is how many ignored offers were seen to time out: the offer vanished from the
	// driver's ping answers without accept or decline, or its ride was then offered to another driver.
	// Ignored offers still live at the end are not counted (OfferTimeouts ≤ OffersIgnored).
	OfferTimeouts int `json:"offer_timeouts"`
	// Rematches is how many rides were matched again: offered to more than one driver (RidesReoffered,
	// after a decline or an offer timeout) or re-opened after an accept (RidesReopened), or both.
	Rematches int `json:"rematches"`
	// RidesReoffered is how many rides were seen offered to two or more distinct drivers in their ping
	// answers.
	RidesReoffered int `json:"rides_reoffered"`
	// RidesReopened is how many rides were seen re-opened after an accept (ACCEPTED → REQUESTED): accepted
	// successfully twice, offered to another driver after the accept, or REQUESTED/UNMATCHED with
	// accepted_at set (or held by another driver) in the final GET.
	RidesReopened int `json:"rides_reopened"`
	// DriversWentOffline is how many simulated drivers the replay took offline for good
	// (OfflineProbPerHour): they stopped pinging and answering.
	DriversWentOffline int `json:"drivers_went_offline"`
	// DriversDropTo is how many drivers remained after the supply drop (0: none) and
	// DriversDroppedBySupply how many it took offline (they sent status offline, or will after
	// the ride they carried), DriversDropAtMin when, simulated minutes into the window.
	DriversDropTo          int     `json:"drivers_drop_to"`
	DriversDroppedBySupply int     `json:"drivers_dropped_by_supply"`
	DriversDropAtMin       float64 `json:"drivers_drop_at_min"`
	// OfflineRidesAbandoned is how many ACCEPTED rides a driver abandoned by going offline before
	// starting them.
	OfflineRidesAbandoned int `json:"offline_rides_abandoned"`
	// OfflineRidesReopened is how many of the abandoned rides were seen re-opened (see RidesReopened);
	// the platform does so once the driver's heartbeat TTL (wall time) lapsed.
	OfflineRidesReopened int `json:"offline_rides_reopened"`
	// OfflineRidesRematched is how many of the abandoned rides another driver accepted afterwards.
	OfflineRidesRematched int `json:"offline_rides_rematched"`

	// TimeToMatchCount is the number of samples behind the time_to_match percentiles.
	TimeToMatchCount int `json:"time_to_match_count"`
	// TimeToMatchP50S is the median simulated seconds from order-create to the accept that stuck (a
	// re-opened ride counts until its latest accept); only matched rides (RidesMatched) are samples.
	TimeToMatchP50S float64 `json:"time_to_match_p50_s"`
	// TimeToMatchP95S is the 95th percentile, simulated seconds.
	TimeToMatchP95S float64 `json:"time_to_match_p95_s"`
	// TimeToMatchP99S is the 99th percentile, simulated seconds.
	TimeToMatchP99S float64 `json:"time_to_match_p99_s"`
	// TimeToMatchMaxS is the longest, simulated seconds (the longest a matched rider waited).
	TimeToMatchMaxS float64 `json:"time_to_match_max_s"`
	// PickupWaitCount is the number of rides behind the pickup_wait percentiles: every matched
	// ride. PickupWaitOnTheWay of them had no driver at the pickup when the replay stopped driving;
	// each counts the wait until then, so with any of them the percentiles are lower bounds (leaving
	// them out would flatter a mode whose drivers drive far).
	PickupWaitCount    int `json:"pickup_wait_count"`
	PickupWaitOnTheWay int `json:"pickup_wait_on_the_way"`
	// PickupWaitP50S, P95S and P99S are the rider's wait from order-create to his driver at the
	// pickup (time to match plus the drive), simulated seconds: what a rider waits, where time to
	// match leaves out a far driver's drive.
	PickupWaitP50S float64 `json:"pickup_wait_p50_s"`
	PickupWaitP95S float64 `json:"pickup_wait_p95_s"`
	PickupWaitP99S float64 `json:"pickup_wait_p99_s"`

	// PickupDistanceCount is the number of samples behind the pickup_distance figures.
	PickupDistanceCount int `json:"pickup_distance_count"`
	// PickupDistanceMeanM is the mean straight-line driver→pickup distance at accept, metres: the
	// distance_m of the offer the driver accepted (the platform's distance from his last applied ping),
	// over the matched rides (RidesMatched).
	PickupDistanceMeanM float64 `json:"pickup_distance_mean_m"`
	// PickupDistanceP50M is the median driver→pickup distance at accept, metres.
	PickupDistanceP50M float64 `json:"pickup_distance_p50_m"`
	// PickupDistanceP95M is the 95th percentile driver→pickup distance at accept, metres.
	PickupDistanceP95M float64 `json:"pickup_distance_p95_m"`

	// OfferLatencyCount is the number of rides behind the offer_latency percentiles.
	OfferLatencyCount int `json:"offer_latency_count"`
	// OfferLatencyP50Ms is the median wall-clock ms from ride creation to its first offer, over the
	// rides offered at their first match attempt (server timestamps first_offered_at − created_at
	// from GET /function/ride/{id}): the latency of ride.requested → offer through relay, broker,
	// trigger and match. Rides that had to wait for a free driver are in time_to_match instead.
	OfferLatencyP50Ms float64 `json:"offer_latency_p50_ms"`
	// OfferLatencyP99Ms is the 99th percentile of the same, wall-clock ms.
	OfferLatencyP99Ms float64 `json:"offer_latency_p99_ms"`
	// Push is whether the simulated phones held WebSockets (Options.Push; --push).
	Push bool `json:"push"`
	// OfferPushLatencyCount is the number of rides behind the offer_push_latency percentiles.
	OfferPushLatencyCount int `json:"offer_push_latency_count"`
	// OfferPushLatencyP50Ms is the median wall-clock ms from order-create's answer to the ride's first
	// offer message arriving on a driver's socket, measured by the replay's own clock (0 when the
	// message came before the answer), over the rides offered at their first match attempt (as
	// offer_latency): order-create → outbox → relay → broker → match → outbox →
	// relay → broker → notify → management API → gateway → socket.
	OfferPushLatencyP50Ms float64 `json:"offer_push_latency_p50_ms"`
	// OfferPushLatencyP99Ms is the 99th percentile of the same, wall-clock ms.
	OfferPushLatencyP99Ms float64 `json:"offer_push_latency_p99_ms"`
	// OffersSeenByPush and OffersSeenByPing count offers by how a driver first learnt of them: a
	// message on his socket, or his next ping answer.
	OffersSeenByPush int `json:"offers_seen_by_push"`
	OffersSeenByPing int `json:"offers_seen_by_ping"`
	// OfferPushShare is OffersSeenByPush / (OffersSeenByPush + OffersSeenByPing), 0..1.
	OfferPushShare float64 `json:"offer_push_share"`
	// PushMessagesReceived is every message the replay's sockets received.
	PushMessagesReceived int64 `json:"push_messages_received"`
	// DriverPositionsPushed is how many driver.position messages reached riders.
	DriverPositionsPushed int `json:"driver_positions_pushed"`
	// PushReconnects is how many times a socket dropped and was opened again; PushDialFailures the
	// handshakes that failed.
	PushReconnects   int64 `json:"push_reconnects"`
	PushDialFailures int64 `json:"push_dial_failures"`
	// PushMessagesLost counts what should have come by push and never did: offers a driver saw in a
	// ping answer while his socket had been up since before they were made (and stayed up), and
	// ACCEPTED statuses of rides whose rider's socket was up when the accept was sent. Must be 0.
	PushMessagesLost int `json:"push_messages_lost"`
	// PushOffersLate counts offers seen in a ping answer whose push never came but whose end
	// (offer.expired, offer.withdrawn) did, or that the driver answered from his ping answer: the
	// platform reached them after their window had closed and pushes no dead offer. Not lost, but
	// a sign that push lags the offer window.
	PushOffersLate int `json:"push_offers_late"`
	// PushLostExamples names the first few lost messages (what, to whom, the socket's history).
	PushLostExamples []string `json:"push_lost_examples,omitempty"`
	// PushConnectionsLeft is how many connections the platform's registry still holds after every
	// socket closed (read with the invariant check; -1 when it did not run). Must be 0.
	PushConnectionsLeft int `json:"push_connections_left"`

	// MatchLatencyCount is the number of rides behind the match_latency percentiles.
	MatchLatencyCount int `json:"match_latency_count"`
	// MatchLatencyP50Ms is the median wall-clock ms from ride creation to the end of its first match
	// attempt, offered or not (first_match_at − created_at).
	MatchLatencyP50Ms float64 `json:"match_latency_p50_ms"`
	// MatchLatencyP99Ms is the 99th percentile of the same, wall-clock ms.
	MatchLatencyP99Ms float64 `json:"match_latency_p99_ms"`

	// SurgeMode is the platform's surge mode as its fare-estimate answers name it (off, shadow, on);
	// empty when no ride was ordered at a quote.
	SurgeMode string `json:"surge_mode"`
	// SurgeQuotes is the number of rides ordered at a fare-estimate quote (the samples of the
	// surge and wait-estimate figures).
	SurgeQuotes int `json:"surge_quotes"`
	// SurgeChargedP50 and SurgeChargedMax are the median and largest multiplier charged (quoted).
	SurgeChargedP50 float64 `json:"surge_charged_p50"`
	SurgeChargedMax float64 `json:"surge_charged_max"`
	// SurgeComputedP50 and SurgeComputedMax are the same of the pickup cells' computed multipliers
	// (what mode on charges; shadow mode computes them without charging).
	SurgeComputedP50 float64 `json:"surge_computed_p50"`
	SurgeComputedMax float64 `json:"surge_computed_max"`
	// SurgeByMinute is the multipliers' distribution per simulated minute of the window, by request time.
	SurgeByMinute []SurgeMinute `json:"surge_by_minute"`
	// WaitEstimateCount is the number of rides behind the wait-estimate figures: quoted with a wait,
	// accepted once, reached by their driver, and requested early enough that a long wait would
	// have been seen too (CensorWaitSamples; WaitErrors.Censored counts the rest).
	WaitEstimateCount int `json:"wait_estimate_count"`
	// WaitEstimateMAES is the mean absolute error of the quoted pickup wait against the time from
	// the request to the driver reaching the pickup, simulated seconds (the quote's match part, in
	// the platform's wall seconds, × speedup, plus its drive part).
	WaitEstimateMAES float64 `json:"wait_estimate_mae_s"`
	// WaitEstimateMeanS and WaitActualMeanS are the mean quoted and actual waits of those rides,
	// simulated seconds (their difference is the estimate's bias).
	WaitEstimateMeanS float64 `json:"wait_estimate_mean_s"`
	WaitActualMeanS   float64 `json:"wait_actual_mean_s"`
	// WaitErrors is the wait estimate's error per simulated minute and over the run, with the
	// per-cell constant-mean baseline (WaitErrors); nil when no ride was quoted.
	WaitErrors *WaitErrorReport `json:"wait_errors,omitempty"`
	// RideStatusCounts counts the rides' final server status (from the final GET).
	RideStatusCounts map[string]int `json:"ride_status_counts"`
	// RideFetchErrors is how many GET /function/ride/{id} calls at the end failed.
	RideFetchErrors int `json:"ride_fetch_errors"`

	// PingsTotal is how many pings the platform answered (each ping of a batch counts once).
	PingsTotal int64 `json:"pings_total"`
	// PingsSent is how many pings the replay sent (put in a location-update call, answered or not;
	// the supply drop's sign-off pings included): the writes the platform was asked for.
	PingsSent int64 `json:"pings_sent"`
	// PingsPerS is PingsTotal divided by the wall seconds the ping phase ran (sustained rate).
	PingsPerS float64 `json:"pings_per_s"`
	// PingRequests is how many location-update HTTP calls were made.
	PingRequests int64 `json:"ping_requests"`
	// PingsSkipped is how many scheduled pings were not sent because the driver's previous ping was
	// still in flight (the replay could not keep up).
	PingsSkipped int64 `json:"pings_skipped"`
	// SendRule tells whether the send rule ran (Options.SendRule).
	SendRule bool `json:"send_rule"`
	// PingsSavedBySendRule is how many pings due at the ping interval the send rule held back
	// (writes saved); SendRuleSavedPct is their share of the pings the drivers would otherwise have
	// sent, 100 × saved / (PingsSent + saved), percent. Both 0 with the rule off.
	PingsSavedBySendRule int64   `json:"pings_saved_by_send_rule"`
	SendRuleSavedPct     float64 `json:"send_rule_saved_pct"`
	// GPSRejected is how many pings the platform answered with rejected = gps_jump.
	GPSRejected int64 `json:"gps_rejected"`
	// StaleRejected is how many pings the platform answered with rejected = stale.
	StaleRejected int64 `json:"stale_rejected"`
	// HTTPErrors counts failed calls (transport errors and unexpected statuses) by endpoint.
	HTTPErrors map[string]int `json:"http_errors"`
	// ErrorExamples are the first few unexpected errors, for display.
	ErrorExamples []string `json:"error_examples"`

	// VerifyRan is true when the platform's invariants were checked at the end (package
	// shared/invariants, as `flagdown verify` does), VerifyGraceS + VerifySettle after the last
	// request. The invariant_* counts are 0 when it did not run.
	VerifyRan bool `json:"verify_ran"`
	// VerifyError says why the check did not run although it was asked for ("" otherwise).
	VerifyError string `json:"verify_error"`
	// VerifyGraceS is the grace the check judged with, seconds.
	VerifyGraceS float64 `json:"verify_grace_s"`
	// VerifyViolations is the sum of the invariant_* counts; the replay fails when it is not 0.
	VerifyViolations int `json:"verify_violations"`
	// VerifyExamples maps each violated invariant's name to up to 10 example ids.
	VerifyExamples map[string][]string `json:"verify_examples"`
	// VerifyNotChecked names the invariants the check could not judge (their count is 0, not a
	// verdict), and VerifyNotCheckedWhy says why (e.g. no broker reachable).
	VerifyNotChecked    []string `json:"verify_not_checked,omitempty"`
	VerifyNotCheckedWhy string   `json:"verify_not_checked_why,omitempty"`
	// InvariantDriverRideMismatch counts drivers whose Redis ride is not their active ride in
	// PostgreSQL (invariants.DriverRideMismatch; every invariant_* count is documented in invariants.All).
	InvariantDriverRideMismatch int `json:"invariant_driver_ride_mismatch"`
	// InvariantAvailableWhileOnRide counts drivers on a ride in the available GEO set.
	InvariantAvailableWhileOnRide int `json:"invariant_available_while_on_ride"`
	// InvariantDriverTwoActiveRides counts drivers with two or more active rides.
	InvariantDriverTwoActiveRides int `json:"invariant_driver_two_active_rides"`
	// InvariantAssignmentRowMismatch counts drivers whose driver_assignments row disagrees with rides.
	InvariantAssignmentRowMismatch int `json:"invariant_assignment_row_mismatch"`
	// InvariantRideTwoPendingOffers counts rides with two or more PENDING offers.
	InvariantRideTwoPendingOffers int `json:"invariant_ride_two_pending_offers"`
	// InvariantDriverTwoPendingOffers counts drivers holding two or more PENDING offers.
	InvariantDriverTwoPendingOffers int `json:"invariant_driver_two_pending_offers"`
	// InvariantPendingOfferWhileOnRide counts PENDING offers to drivers on an active ride.
	InvariantPendingOfferWhileOnRide int `json:"invariant_pending_offer_while_on_ride"`
	// InvariantPendingOfferOverdue counts PENDING offers past their window plus the grace.
	InvariantPendingOfferOverdue int `json:"invariant_pending_offer_overdue"`
	// InvariantRequestedRideIdle counts REQUESTED rides idle past the grace with no offer and no timer.
	InvariantRequestedRideIdle int `json:"invariant_requested_ride_idle"`
	// InvariantOutboxBacklog counts outbox rows unpublished past the grace.
	InvariantOutboxBacklog int `json:"invariant_outbox_backlog"`
	// InvariantRidePositionWrongDriver counts active rides whose live position names another driver.
	InvariantRidePositionWrongDriver int `json:"invariant_ride_position_wrong_driver"`
	// InvariantFenceAhead counts drivers (and the token sequence) for whom Redis holds a newer
	// fencing token than PostgreSQL.
	InvariantFenceAhead int `json:"invariant_fence_ahead"`
	// InvariantFenceBehind counts settled drivers whose last fencing token never reached Redis.
	InvariantFenceBehind int `json:"invariant_fence_behind"`
	// InvariantOfferLockNotPending counts offer locks holding an offer that is not PENDING.
	InvariantOfferLockNotPending int `json:"invariant_offer_lock_not_pending"`
	// InvariantPendingOfferNoLock counts open PENDING offers whose driver's lock is missing.
	InvariantPendingOfferNoLock int `json:"invariant_pending_offer_no_lock"`
	// InvariantPickupOverdue counts rides still ACCEPTED past the pickup deadline plus the grace.
	InvariantPickupOverdue int `json:"invariant_pickup_overdue"`
	// InvariantTripOverdueNoAlert counts rides IN_PROGRESS past the trip ceiling with no alert.
	InvariantTripOverdueNoAlert int `json:"invariant_trip_overdue_no_alert"`
	// InvariantDeadLetteredEvents counts events in the dead-letter stream (when a broker was checked).
	InvariantDeadLetteredEvents int `json:"invariant_dead_lettered_events"`
	// InvariantConsumerLag counts consumers too far behind (when a broker was checked).
	InvariantConsumerLag int `json:"invariant_consumer_lag"`

	// WallSeconds is the wall-clock duration of the whole replay, seconds.
	WallSeconds float64 `json:"wall_seconds"`
	// Interrupted is true when the replay was cancelled before the end (figures are partial).
	Interrupted bool `json:"interrupted"`

	// GroundTruth is the verdict of the replay's ground truth (Options.GroundTruth; nil when it did
	// not run): offline decisions, re-openings and trip alerts without cause, missed offline
	// drivers, acknowledged actions not reflected, offline detection latency.
	GroundTruth *GroundTruth `json:"ground_truth"`
	// GroundTruthError says why it did not run although it was asked for ("" otherwise).
	GroundTruthError string `json:"ground_truth_error"`
	// ActionRetries is how many times an accept, start or complete was sent again after a
	// transport error, a 429 or a 5xx; ActionsUnanswered how many got no final answer before the
	// replay ended.
	ActionRetries     int `json:"action_retries"`
	ActionsUnanswered int `json:"actions_unanswered"`
	// RidesInHand are the rides a simulated driver still held (accepting, driving to the pickup or
	// the dropoff) when the replay stopped: they are ACCEPTED or IN_PROGRESS for a reason.
	RidesInHand []string `json:"-"`
	// ridesAbandoned maps each ride whose latest accept was abandoned (its driver dropped offline
	// before starting it, and nobody accepted it since) to that driver.
	ridesAbandoned map[string]string
	// truth is the replay's side of its ground truth (Rejudge).
	truth truthInput
	// TripsInWindow is how many trips of the file fall in the replay window.
	TripsInWindow int `json:"trips_in_window"`
	// TripsSkippedRows is how many CSV rows failed to parse.
	TripsSkippedRows int `json:"trips_skipped_rows"`

	// Drivers is the number of simulated drivers.
	Drivers int `json:"drivers"`
	// Speedup is simulated seconds per wall second.
	Speedup float64 `json:"speedup"`
	// WindowMinutes is the replayed window of trips, simulated minutes from its opening.
	WindowMinutes float64 `json:"window_minutes"`
	// WindowSkipMinutes is how many simulated minutes after the file's first pickup the window opens.
	WindowSkipMinutes float64 `json:"window_skip_minutes"`
	// PingIntervalS is the drivers' ping interval, simulated seconds.
	PingIntervalS float64 `json:"ping_interval_s"`
	// AcceptProb is the probability (0..1) a driver accepts an offer he answers.
	AcceptProb float64 `json:"accept_prob"`
	// NoAnswerProb is the probability (0..1), per offer, that a driver ignores it.
	NoAnswerProb float64 `json:"no_answer_prob"`
	// OfflineProbPerHour is the probability (0..1) that a driver drops offline for good within any one
	// simulated hour of his shift.
	OfflineProbPerHour float64 `json:"offline_prob_per_h"`
	// DriverSpeedMPS is the drivers' straight-line speed, metres per simulated second.
	DriverSpeedMPS float64 `json:"driver_speed_mps"`
	// DrainS is the simulated seconds the replay ran after the last order-create.
	DrainS float64 `json:"drain_s"`
	// Seed is the random seed.
	Seed uint64 `json:"seed"`
	// Concurrency is the number of HTTP workers.
	Concurrency int `json:"concurrency"`
	// BatchSize is the number of pings per location-update call (1 = one ping per call).
	BatchSize int `json:"batch_size"`
	// TripsPath is the trips CSV replayed.
	TripsPath string `json:"trips_path"`
	// URL is the platform's base URL.
	URL string `json:"url"`
	// RunID distinguishes this run's driver and rider ids from other runs'.
	RunID string `json:"run_id"`

	// RideIDs are the ids of the RidesRequested rides, in no particular order (not written to the
	// JSON: the chaos run checks each of them in PostgreSQL).
	RideIDs []string `json:"-"`
}

// invariantFields maps every invariant to its Summary field.
func (s *Summary) invariantFields() map[invariants.Name]*int {
	return map[invariants.Name]*int{
		invariants.DriverRideMismatch:      &s.InvariantDriverRideMismatch,
		invariants.AvailableWhileOnRide:    &s.InvariantAvailableWhileOnRide,
		invariants.DriverTwoActiveRides:    &s.InvariantDriverTwoActiveRides,
		invariants.AssignmentRowMismatch:   &s.InvariantAssignmentRowMismatch,
		invariants.RideTwoPendingOffers:    &s.InvariantRideTwoPendingOffers,
		invariants.DriverTwoPendingOffers:  &s.InvariantDriverTwoPendingOffers,
		invariants.PendingOfferWhileOnRide: &s.InvariantPendingOfferWhileOnRide,
		invariants.PendingOfferOverdue:     &s.InvariantPendingOfferOverdue,
		invariants.RequestedRideIdle:       &s.InvariantRequestedRideIdle,
		invariants.OutboxBacklog:           &s.InvariantOutboxBacklog,
		invariants.RidePositionWrongDriver: &s.InvariantRidePositionWrongDriver,
		invariants.FenceAhead:              &s.InvariantFenceAhead,
		invariants.FenceBehind:             &s.InvariantFenceBehind,
		invariants.OfferLockNotPending:     &s.InvariantOfferLockNotPending,
		invariants.PendingOfferNoLock:      &s.InvariantPendingOfferNoLock,
		invariants.PickupOverdue:           &s.InvariantPickupOverdue,
		invariants.TripOverdueNoAlert:      &s.InvariantTripOverdueNoAlert,
		invariants.DeadLetteredEvents:      &s.InvariantDeadLetteredEvents,
		invariants.ConsumerLag:             &s.InvariantConsumerLag,
	}
}

// setInvariants records what invariants.Check found (VerifyRan, the counts, their sum and the
// examples of the violated invariants).
func (s *Summary) setInvariants(rep invariants.Report) {
	s.VerifyRan, s.VerifyViolations = true, rep.Violations()
	s.VerifyExamples = map[string][]string{}
	s.VerifyNotChecked, s.VerifyNotCheckedWhy = nil, rep.NotCheckedWhy
	for _, n := range rep.NotChecked {
		s.VerifyNotChecked = append(s.VerifyNotChecked, string(n))
	}
	fields := s.invariantFields()
	for _, r := range rep.Results {
		if f := fields[r.Name]; f != nil {
			*f = r.Count
		}
		if r.Count > 0 {
			s.VerifyExamples[string(r.Name)] = r.Examples
		}
	}
}

// WriteJSON writes s as indented JSON to path (creating or truncating it).
func (s *Summary) WriteJSON(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable prints the summary figures as an aligned table.
func (s *Summary) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, f string, a ...any) { fmt.Fprintf(tw, "%s\t"+f+"\n", append([]any{k}, a...)...) }
	if s.Interrupted {
		row("INTERRUPTED", "%s", "figures are partial")
	}
	row("match mode / driver starts", "%s / %s (start pool: %d dropoffs before the window, %d fallback)",
		s.MatchMode, s.DriverStarts, s.DriverStartTripsBefore, s.DriverStartTripsFallback)
	row("rides requested", "%d (rejected %d, trips in window %d)", s.RidesRequested, s.RidesRejected, s.TripsInWindow)
	row("rides offered", "%d", s.RidesOffered)
	row("rides matched (accept stuck)", "%d (accepted %d)", s.RidesMatched, s.RidesAccepted)
	row("rides completed", "%d", s.RidesCompleted)
	final := ""
	if !s.FinalStatusKnown {
		final = " (final status unknown)"
	}
	row("rides unmatched", "%d UNMATCHED, %d still REQUESTED%s", s.RidesUnmatched, s.RidesNeverMatched, final)
	row("match rate", "%.1f %%", 100*s.MatchRate)
	row("offers / declines", "%d / %d (decline 409s %d)", s.OffersTotal, s.Declines, s.DeclineConflicts)
	row("offers ignored / timed out", "%d / %d (no-answer prob %g)", s.OffersIgnored, s.OfferTimeouts, s.NoAnswerProb)
	row("rematches", "%d rides (offered to 2+ drivers %d, re-opened after accept %d)", s.Rematches, s.RidesReoffered, s.RidesReopened)
	row("drivers went offline", "%d (%g per sim hour); accepted rides abandoned %d, re-opened %d, re-matched %d",
		s.DriversWentOffline, s.OfflineProbPerHour, s.OfflineRidesAbandoned, s.OfflineRidesReopened, s.OfflineRidesRematched)
	if s.DriversDropTo > 0 {
		row("supply drop", "%d drivers signed off at %.1f min (to %d)", s.DriversDroppedBySupply, s.DriversDropAtMin, s.DriversDropTo)
	}
	row("accept conflicts (409)", "%d %v", s.AcceptConflicts, s.AcceptConflictReasons)
	row("time to match p50/p95/p99", "%.1f / %.1f / %.1f s simulated (n=%d)", s.TimeToMatchP50S, s.TimeToMatchP95S, s.TimeToMatchP99S, s.TimeToMatchCount)
	row("pickup wait p50/p95/p99", "%.1f / %.1f / %.1f s simulated (n=%d, request → driver at the pickup; %d still on the way at the end count until then)",
		s.PickupWaitP50S, s.PickupWaitP95S, s.PickupWaitP99S, s.PickupWaitCount, s.PickupWaitOnTheWay)
	row("pickup distance mean/p50/p95", "%.0f / %.0f / %.0f m (n=%d)", s.PickupDistanceMeanM, s.PickupDistanceP50M, s.PickupDistanceP95M, s.PickupDistanceCount)
	row("offer latency p50/p99", "%.0f / %.0f ms wall (n=%d, offered at the first attempt)", s.OfferLatencyP50Ms, s.OfferLatencyP99Ms, s.OfferLatencyCount)
	if s.Push {
		row("offer push latency p50/p99", "%.0f / %.0f ms wall (n=%d, order-create answered → offer on the driver's socket, offered at the first attempt)", s.OfferPushLatencyP50Ms, s.OfferPushLatencyP99Ms, s.OfferPushLatencyCount)
		row("offers seen by push / ping", "%d / %d (push share %.3f)", s.OffersSeenByPush, s.OffersSeenByPing, s.OfferPushShare)
		row("push messages / positions", "%d received, %d driver positions to riders", s.PushMessagesReceived, s.DriverPositionsPushed)
		row("push lost / reconnects / left", "%d lost, %d reconnects (%d failed handshakes), %d connections left", s.PushMessagesLost, s.PushReconnects, s.PushDialFailures, s.PushConnectionsLeft)
		row("offers pushed too late", "%d (seen by ping, answered or ended, never pushed)", s.PushOffersLate)
	}
	row("match latency p50/p99", "%.0f / %.0f ms wall (n=%d, request → first match decision)", s.MatchLatencyP50Ms, s.MatchLatencyP99Ms, s.MatchLatencyCount)
	if s.SurgeQuotes > 0 {
		row("surge multiplier p50/max", "charged %.2f / %.2f, computed %.2f / %.2f (mode %s, n=%d quotes)",
			s.SurgeChargedP50, s.SurgeChargedMax, s.SurgeComputedP50, s.SurgeComputedMax, s.SurgeMode, s.SurgeQuotes)
		var b strings.Builder
		for _, m := range s.SurgeByMinute {
			fmt.Fprintf(&b, " %d:%.2f/%.2f", m.Minute, m.ComputedP50, m.ComputedMax)
		}
		row("surge computed by minute", "p50/max per simulated minute:%s", b.String())
		row("wait estimate MAE", "%.1f s simulated (n=%d; mean quoted %.1f s, actual request → driver at pickup %.1f s)",
			s.WaitEstimateMAES, s.WaitEstimateCount, s.WaitEstimateMeanS, s.WaitActualMeanS)
		s.WaitErrors.writeRows(row)
	}
	if len(s.RideStatusCounts) > 0 {
		row("final ride status", "%v", s.RideStatusCounts)
	}
	row("pings", "%d sent, %d answered in %d calls, %.0f /s wall (skipped %d)", s.PingsSent, s.PingsTotal, s.PingRequests, s.PingsPerS, s.PingsSkipped)
	row("pings rejected", "gps_jump %d, stale %d", s.GPSRejected, s.StaleRejected)
	if s.SendRule {
		row("send rule", "on: %d writes saved (%.1f %% of %d sent + saved; 50 m or 15 s when stationary or carrying)",
			s.PingsSavedBySendRule, s.SendRuleSavedPct, s.PingsSent+s.PingsSavedBySendRule)
	} else {
		row("send rule", "off: every driver pings every %g s", s.PingIntervalS)
	}
	if len(s.HTTPErrors) > 0 {
		row("http errors", "%v", s.HTTPErrors)
	}
	row("driver actions", "%d retried, %d unanswered at the end", s.ActionRetries, s.ActionsUnanswered)
	if g := s.GroundTruth; g != nil {
		g.WriteRows(row)
	} else if s.GroundTruthError != "" {
		row("ground truth", "NOT JUDGED: %s", s.GroundTruthError)
	}
	switch {
	case s.VerifyRan:
		fields := s.invariantFields()
		for _, inv := range invariants.All {
			n := *fields[inv.Name]
			ex := ""
			if n > 0 {
				ex = "  e.g. " + strings.Join(s.VerifyExamples[string(inv.Name)], ", ")
			}
			if slices.Contains(s.VerifyNotChecked, string(inv.Name)) {
				row("invariant "+string(inv.Name), "not checked")
				continue
			}
			row("invariant "+string(inv.Name), "%d%s", n, ex)
		}
		switch {
		case s.VerifyViolations == 0 && len(s.VerifyNotChecked) > 0:
			row("invariants", "all %d checked hold (grace %g s); not checked: %s (%s)", len(invariants.All)-len(s.VerifyNotChecked),
				s.VerifyGraceS, strings.Join(s.VerifyNotChecked, ", "), s.VerifyNotCheckedWhy)
		case s.VerifyViolations == 0:
			row("invariants", "all %d hold (grace %g s)", len(invariants.All), s.VerifyGraceS)
		default:
			row("invariants", "%d VIOLATIONS (grace %g s)", s.VerifyViolations, s.VerifyGraceS)
		}
	case s.VerifyError != "":
		row("invariants", "NOT CHECKED: %s", s.VerifyError)
	default:
		row("invariants", "not checked")
	}
	row("wall time", "%.1f s", s.WallSeconds)
	row("drivers / speedup / window", "%d / %gx / %g min (after %g min skipped)", s.Drivers, s.Speedup, s.WindowMinutes, s.WindowSkipMinutes)
	tw.Flush()
	for _, e := range s.RejectedExamples {
		fmt.Fprintf(w, "  rejected: %s\n", e)
	}
	for _, e := range s.ErrorExamples {
		fmt.Fprintf(w, "  error: %s\n", e)
	}
}

// RidesAwaitingOffline are the rides whose driver dropped offline before starting them while the
// platform was not yet bound to take him offline: the ground truth did not judge his deadline (an
// outage not over, or the replay's own end, holds every offline decision; docs/resilience.md, the
// offline brake). They stay ACCEPTED with reason until his deadline is judged (Rejudge), as the
// rides of RidesInHand do.
func (s *Summary) RidesAwaitingOffline() []string {
	if s.GroundTruth == nil {
		return nil
	}
	var ids []string
	for id, d := range s.ridesAbandoned {
		if s.GroundTruth.unjudged[d] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}
