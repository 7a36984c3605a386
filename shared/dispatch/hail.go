package dispatch

import (
	"strings"
	"time"
)

// Street-hail pairing ("shake"): a rider and a driver who stand together each press "hail" on their
// phone. Each press is a hail entry that lives HailRules.Window; a press pairs with the one entry of
// the other side (a rider's with a driver's) that
//
//   - is still alive: pressed at most Window before, by Redis's clock (so both presses fall within
//     Window of each other),
//   - lies within RadiusM metres of the press (straight-line distance between the two phones'
//     positions),
//   - carries the same short code (normalized, NormalizeHailCode), or neither carries one: a code
//     typed on either phone must be typed on both,
//   - and, for a driver's entry, whose driver is still online, available, without a ride, an offer
//     or another pairing in progress.
//
// Exactly one such counterpart pairs: the ride is created ACCEPTED at once with that driver, the
// rider's position as its pickup, without any offer. None: the press becomes a waiting entry
// (answered with its expiry). Two or more: the press is refused as ambiguous (ReasonHailAmbiguous)
// and is not entered; the candidates it found keep waiting untouched, because a stranger's press
// must not be able to cancel other people's hails, and one of them may still pair with its true
// counterpart (a second press with a code picks it out). Two presses of one side never pair.
//
// Every guarantee of other rides holds: a driver with an active ride or a live offer, or a rider
// with an open ride, cannot hail (ReasonDriverBusy, ReasonRiderHasOpenRide, ReasonHailDriverUnavailable),
// and PostgreSQL's unique indexes decide the last race.

// HailSide is the side of a hail entry: the role of whoever pressed.
type HailSide string

// Hail sides.
const (
	HailRider  HailSide = "rider"
	HailDriver HailSide = "driver"
)

// Other returns the side a press of s pairs with.
func (s HailSide) Other() HailSide {
	if s == HailRider {
		return HailDriver
	}
	return HailRider
}

// HailRules are the numbers of street-hail pairing (FLAGDOWN_HAIL_WINDOW, FLAGDOWN_HAIL_RADIUS_M).
type HailRules struct {
	// Window is how long a hail entry waits for its counterpart: two presses pair only when the
	// second comes at most Window after the first (Redis's clock).
	Window time.Duration
	// RadiusM is the largest distance between the two presses' positions, metres.
	RadiusM float64
}

// HailHold is how long a driver being paired by a hail is held against offers (match cannot lock
// him) while the ride is written to PostgreSQL; the pairing releases him at once when it ends, so
// the hold only outlives it when the process dies in between.
const HailHold = 10 * time.Second

// MaxHailCodeLen is the longest short code, in characters (letters A–Z, digits 0–9).
const MaxHailCodeLen = 8

// Conflict reasons of street-hail pairing (CodeConflict).
const (
	// ReasonHailAmbiguous: the press found two or more counterparts it could pair with; it was
	// refused (details.candidates says how many). Pressing again with a short code on both phones
	// picks the right one.
	ReasonHailAmbiguous = "hail_ambiguous"
	// ReasonHailDriverUnavailable: the driver cannot hail now: offline (no heartbeat), not available
	// (paused, on a ride), holding a live offer, or already being paired (details.driver_state).
	ReasonHailDriverUnavailable = "hail_driver_unavailable"
)

// NormalizeHailCode validates an optional short code (field names it) and returns it upper-cased:
// empty, or 1 to MaxHailCodeLen letters and digits (case does not matter: "ab12" is "AB12").
func NormalizeHailCode(field, code string) (string, error) {
	if code == "" {
		return "", nil
	}
	if len(code) > MaxHailCodeLen {
		return "", Invalid(field, "must be at most 8 letters or digits")
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return "", Invalid(field, "must contain only letters A-Z and digits 0-9 ("+describeAt(code, i)+")")
		}
	}
	return strings.ToUpper(code), nil
}

// HailPress is one press of "hail": who pressed (Side and ID, from his token), where (Position,
// WGS84 degrees), the optional short code (normalized, NormalizeHailCode) and, for a rider, where
// he goes (Dropoff, required of a rider: the ride's fare is estimated from it as for a requested
// ride; nil for a driver).
type HailPress struct {
	Side     HailSide
	ID       string
	Position Point
	Code     string
	Dropoff  *Point
}
