package dispatch

import "time"

// LiveOffer is a driver's live offer: the value of his offer lock in Redis and the offer shown in
// his ping answers (the HTTP API's "offer" object). It is the one wire format of an offer to a driver.
type LiveOffer struct {
	OfferID string `json:"offer_id"`
	RideID  string `json:"ride_id"`
	// Pickup and Dropoff are WGS84 degrees.
	Pickup  Point `json:"pickup"`
	Dropoff Point `json:"dropoff"`
	// DistanceM is the straight-line distance from the driver to the pickup in metres when offered.
	DistanceM float64 `json:"distance_m"`
	// ExpiresAt is the end of the offer window, by PostgreSQL's clock (offers.expires_at).
	ExpiresAt time.Time `json:"expires_at"`
}
