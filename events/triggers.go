package events

// Trigger routes event types to the function that consumes them. The same table drives the local
// platform's triggers (flagdown dev) and the deployment manifests, so they cannot drift.
type Trigger struct {
	// Function is the consuming function's name (its folder under functions/).
	Function string
	// Types are the event types delivered to it.
	Types []string
}

// Triggers is every (event types → function) route in flagdown.
var Triggers = []Trigger{
	{Function: "match", Types: []string{RideRequested, RideOfferDeclined, RideReopened, RideOfferExpired, RideRetry, MatchBatchDue}},
	{Function: "expiry-notification", Types: []string{RedisKeyExpired}},
	{Function: "notify", Types: []string{RideOffered, RideOfferExpired, RideAccepted, RideStarted, RideCompleted,
		RideCancelled, RideReopened, RideUnmatched}},
}

// TypesFor returns the event types routed to function, or nil.
func TypesFor(function string) []string {
	for _, t := range Triggers {
		if t.Function == function {
			return t.Types
		}
	}
	return nil
}
