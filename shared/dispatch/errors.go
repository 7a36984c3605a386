// Package dispatch is flagdown's domain: rides, drivers, offers, their statuses and state machine,
// input rules, fare estimates, candidate scoring and the error type every layer speaks. It does no I/O.
package dispatch

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// Code classifies an error. The HTTP layer maps each code to exactly one status (shared/httpx).
type Code string

// Error codes.
const (
	// CodeInvalidArgument: the request breaks a documented rule; nothing was written.
	CodeInvalidArgument Code = "invalid_argument"
	// CodeTooLarge: the request body or batch is larger than allowed; nothing was written.
	CodeTooLarge Code = "too_large"
	// CodeMethodNotAllowed: the endpoint does not serve the request's HTTP method (the answer's
	// Allow header lists the ones it does).
	CodeMethodNotAllowed Code = "method_not_allowed"
	// CodeNotFound: the named ride, driver or offer does not exist.
	CodeNotFound Code = "not_found"
	// CodeConflict: the request is valid but the current state forbids it (Reason says why).
	CodeConflict Code = "conflict"
	// CodeUnauthenticated: no valid credentials.
	CodeUnauthenticated Code = "unauthenticated"
	// CodePermissionDenied: the caller may not act on this resource.
	CodePermissionDenied Code = "permission_denied"
	// CodeRateLimited: the caller spent his budget (shared/ratelimit); retry after
	// details.retry_after_s seconds. Nothing was written.
	CodeRateLimited Code = "rate_limited"
	// CodeUnavailable: a dependency (Redis, PostgreSQL, broker) is unreachable; retry later.
	CodeUnavailable Code = "unavailable"
	// CodeInternal: a bug or unexpected failure; details are logged, never shown.
	CodeInternal Code = "internal"
)

// Conflict reasons carried in Error.Reason with CodeConflict.
const (
	// ReasonRideTaken: another driver already accepted the ride, or it is no longer REQUESTED.
	ReasonRideTaken = "ride_taken"
	// ReasonOfferExpired: the driver's offer window closed before the accept.
	ReasonOfferExpired = "offer_expired"
	// ReasonNotYourOffer: the driver holds no offer for this ride.
	ReasonNotYourOffer = "not_your_offer"
	// ReasonDriverBusy: the driver already has an active ride (or, for an offer, holds a PENDING one).
	ReasonDriverBusy = "driver_busy"
	// ReasonIllegalTransition: the ride's current status does not allow the action.
	ReasonIllegalTransition = "illegal_transition"
	// ReasonRiderHasOpenRide: the rider already has a REQUESTED, ACCEPTED or IN_PROGRESS ride.
	ReasonRiderHasOpenRide = "rider_has_open_ride"
	// ReasonIdempotencyKeyReused: the Idempotency-Key was used before with a different request.
	ReasonIdempotencyKeyReused = "idempotency_key_reused"
	// ReasonQuoteExpired: the fare quote named by the ride request is unknown or past its validity
	// (or another rider's): the rider must ask for a new estimate before he is charged a price.
	ReasonQuoteExpired = "quote_expired"
	// ReasonTooManyDevices: the user has as many push devices registered as he may
	// (FLAGDOWN_MAX_DEVICES_PER_USER); he must remove one before he registers another.
	ReasonTooManyDevices = "too_many_devices"
)

// Error is flagdown's error: a code, an optional field and reason, and a message fit for the caller.
type Error struct {
	// Code classifies the error.
	Code Code
	// Field names the offending input field in JSON path form (pickup.lat, pings[3].driver_id).
	Field string
	// Reason is a stable machine-readable detail, e.g. ReasonOfferExpired.
	Reason string
	// Message is a human-readable sentence naming the field and the rule.
	Message string
	// Details carries extra JSON-serialisable facts (current_status, ride_id, ...).
	Details map[string]any
	// Err is the wrapped cause, logged but never shown to callers for CodeInternal.
	Err error
}

// Error is "<code>: <message>", with the wrapped cause after it when there is one.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Invalid returns a CodeInvalidArgument error for field breaking rule, e.g.
// Invalid("pickup.lat", "must be between -85.05112878 and 85.05112878").
func Invalid(field, rule string) *Error {
	return &Error{Code: CodeInvalidArgument, Field: field, Message: field + ": " + rule}
}

// Conflict returns a CodeConflict error with a reason and a message.
func Conflict(reason, msg string) *Error {
	return &Error{Code: CodeConflict, Reason: reason, Message: msg}
}

// PermissionDenied returns a CodePermissionDenied error: the caller is authenticated but field
// (e.g. "driver_id", "role") says he may not do this; rule says why.
func PermissionDenied(field, rule string) *Error {
	return &Error{Code: CodePermissionDenied, Field: field, Message: field + ": " + rule}
}

// NotFound returns a CodeNotFound error for a kind of thing and its id.
func NotFound(kind, id string) *Error {
	return &Error{Code: CodeNotFound, Message: fmt.Sprintf("%s %q not found", kind, id)}
}

// Unavailable wraps a dependency failure (Redis, PostgreSQL, broker).
func Unavailable(what string, err error) *Error {
	return &Error{Code: CodeUnavailable, Message: what + " is unavailable", Err: err}
}

// Internal wraps an unexpected failure.
func Internal(err error) *Error {
	return &Error{Code: CodeInternal, Message: "internal error", Err: err}
}

// With returns e with a detail added.
func (e *Error) With(key string, value any) *Error {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = value
	return e
}

// ErrorCode returns the code of err: its own if it is or wraps an *Error, CodeUnavailable for an
// unclassified lost or refused connection (connectionLost), CodeInternal otherwise.
func ErrorCode(err error) Code { return AsError(err).Code }

// AsError returns err as an *Error: itself if it is or wraps one; an unclassified lost or refused
// connection to a dependency (connectionLost) as CodeUnavailable; any other unknown error as
// CodeInternal.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if connectionLost(err) {
		return Unavailable("a dependency", err)
	}
	return Internal(err)
}

// connectionLost reports whether err is a failure of the connection to a dependency rather than of
// the request: a dial or read that failed at the network (a *net.OpError: refused, reset, timed
// out), a connection reset or refused, or one cut in the middle of an answer (io.ErrUnexpectedEOF,
// as when PostgreSQL crashes mid-query). Trying again later may succeed.
func connectionLost(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}
