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
// Presses are bound to where the phones are. A driver's press is checked against his last accepted
// ping (the position location-update applied; HailRules.PingMaxAge, GPSSlackM): the ping must be at
// most PingMaxAge old (ReasonHailLastPingStale), the press within RadiusM + GPSSlackM of it
// (ReasonHailFarFromLastPing) and no GPS jump from it by the pings' own rule (ReasonHailGPSJump):
// a driver last seen at JFK cannot press next to a rider in Brooklyn. A rider has no pings, so her
// press pairs only with a driver whose last ping, fresh, lies within RadiusM + GPSSlackM of her; and
// her presses are judged against her previous one (remembered HailRiderMemory) by the GPS-jump
// rule, so one account cannot sweep the city for waiting drivers. Both sides spend the hail budget
// (shared/ratelimit).
//
// Short codes resist guessing: at least MinHailCodeLen characters, and a presser who typed
// CodeMaxWrong wrong codes (a code none of the coded counterparts near his press carries) within
// CodeLockout is refused until that window ends (CodeRateLimited, ReasonHailCodeTries). An
// ambiguous press is refused without saying how many counterparts it found.
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

// HailRules are the numbers of street-hail pairing (FLAGDOWN_HAIL_WINDOW, FLAGDOWN_HAIL_RADIUS_M,
// FLAGDOWN_HAIL_PING_MAX_AGE, FLAGDOWN_HAIL_GPS_SLACK_M, FLAGDOWN_HAIL_CODE_MAX_WRONG,
// FLAGDOWN_HAIL_CODE_LOCKOUT).
type HailRules struct {
	// Window is how long a hail entry waits for its counterpart: two presses pair only when the
	// second comes at most Window after the first (Redis's clock).
	Window time.Duration
	// RadiusM is the largest distance between the two presses' positions, metres.
	RadiusM float64
	// PingMaxAge is how old a driver's last accepted ping may be when he presses (its fix time
	// against Redis's clock).
	PingMaxAge time.Duration
	// GPSSlackM is the GPS error allowed on top of RadiusM between a driver's last ping and his
	// press, and between it and the rider he pairs with, metres.
	GPSSlackM float64
	// CodeMaxWrong is how many wrong short codes one presser may type within CodeLockout.
	CodeMaxWrong int
	// CodeLockout is the window wrong codes are counted in, from the first one.
	CodeLockout time.Duration
}

// HailRiderMemory is how long a rider's last press is remembered to judge her next one by the
// GPS-jump rule: at the default maximum speed (55 m/s) she may be 33 km away after it, across the
// service area.
const HailRiderMemory = 10 * time.Minute

// HailHold is how long a driver being paired by a hail is held against offers (match cannot lock
// him) while the ride is written to PostgreSQL; the pairing releases him at once when it ends, so
// the hold only outlives it when the process dies in between.
const HailHold = 10 * time.Second

// MinHailCodeLen and MaxHailCodeLen are the shortest and longest short code, in characters (letters
// A–Z, digits 0–9): 36^4 ≈ 1.7 million codes of the shortest length, against CodeMaxWrong guesses.
const (
	MinHailCodeLen = 4
	MaxHailCodeLen = 8
)

// Conflict reasons of street-hail pairing (CodeConflict).
const (
	// ReasonHailAmbiguous: the press found two or more counterparts it could pair with; it was
	// refused (without saying how many: the count would tell a prober who waits where). Pressing
	// again with a short code on both phones picks the right one.
	ReasonHailAmbiguous = "hail_ambiguous"
	// ReasonHailLastPingStale: the driver's last accepted ping is older than HailRules.PingMaxAge.
	ReasonHailLastPingStale = "hail_last_ping_stale"
	// ReasonHailFarFromLastPing: the driver's press lies farther than RadiusM + GPSSlackM from his
	// last accepted ping.
	ReasonHailFarFromLastPing = "hail_far_from_last_ping"
	// ReasonHailGPSJump: the press is a GPS jump from the presser's last fix (a driver's last ping,
	// a rider's previous press) by the pings' rule (FLAGDOWN_MAX_SPEED_MPS).
	ReasonHailGPSJump = "hail_gps_jump"
	// ReasonHailDriverUnavailable: the driver cannot hail now: offline (no heartbeat), not available
	// (paused, on a ride), holding a live offer, or already being paired (details.driver_state).
	ReasonHailDriverUnavailable = "hail_driver_unavailable"
)

// ReasonHailCodeTries (with CodeRateLimited): the presser typed HailRules.CodeMaxWrong wrong short
// codes within CodeLockout; he may hail again after details.retry_after_s.
const ReasonHailCodeTries = "hail_code_tries"

// NormalizeHailCode validates an optional short code (field names it) and returns it upper-cased:
// empty, or MinHailCodeLen to MaxHailCodeLen letters and digits (case does not matter: "ab12" is
// "AB12").
func NormalizeHailCode(field, code string) (string, error) {
	if code == "" {
		return "", nil
	}
	if len(code) < MinHailCodeLen || len(code) > MaxHailCodeLen {
		return "", Invalid(field, "must be 4 to 8 letters or digits")
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
