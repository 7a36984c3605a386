package dispatch

import "time"

// Rules are the numbers the domain decisions of ride creation and matching use: where rides may
// start and end, how long an offer stands, how a ride nobody could be offered is retried, how long an accepted or started ride may take, how long a
// batch window waits, how street hails pair and how a fare is estimated. shared/config builds them
// once from a validated configuration (config.Config.Rules), and the services that decide
// (shared/lifecycle) take this value rather than the whole configuration.
type Rules struct {
	// ServiceArea is the box rides may start and end in (FLAGDOWN_SERVICE_AREA), WGS84 degrees.
	ServiceArea Area
	// OfferWindow is how long a driver has to accept an offer (FLAGDOWN_OFFER_WINDOW).
	OfferWindow time.Duration
	// RetryBase is the first wait before a ride nobody could be offered is matched again; it
	// doubles per attempt up to RetryMaxWait (RetryWait; FLAGDOWN_RETRY_BASE).
	RetryBase time.Duration
	// RetryMaxWait caps one retry wait (FLAGDOWN_RETRY_MAX_WAIT).
	RetryMaxWait time.Duration
	// RetryMaxAttempts is the most match attempts of a ride before it becomes UNMATCHED
	// (FLAGDOWN_RETRY_MAX_ATTEMPTS).
	RetryMaxAttempts int
	// RetryBudget is the longest a ride may wait for a driver, from its request, before it becomes
	// UNMATCHED (FLAGDOWN_RETRY_BUDGET).
	RetryBudget time.Duration
	// PickupDeadline is the longest an ACCEPTED ride waits for its start, from its accept, before
	// it is re-opened (FLAGDOWN_PICKUP_DEADLINE; 0: no deadline).
	PickupDeadline time.Duration
	// TripCeiling is the longest an IN_PROGRESS ride runs, from its start, before ride.overdue is
	// raised (FLAGDOWN_TRIP_CEILING; 0: no alert).
	TripCeiling time.Duration
	// BatchWindow is, in batch mode, how long the first ride of a batch waits for others
	// (FLAGDOWN_BATCH_WINDOW).
	BatchWindow time.Duration
	// SimSpeedup is how many of the riders' seconds pass per second of the platform's clock
	// (FLAGDOWN_SIM_SPEEDUP: 1 in a real city, a replay's speed-up in simulated time); RiderSeconds.
	SimSpeedup float64
	// Hail are the numbers of street-hail pairing (FLAGDOWN_HAIL_WINDOW, FLAGDOWN_HAIL_RADIUS_M).
	Hail HailRules
	// Fare are the fare-estimate parameters (FLAGDOWN_FARE_*, FLAGDOWN_ROAD_FACTOR,
	// FLAGDOWN_AVG_SPEED_MPS).
	Fare FareParams
}
