// Package logging builds flagdown's one logger (log/slog): every function, `flagdown dev` and every
// long-running part (relay, expiry source, cron) logs through New, in one format — JSON objects, one
// a line, by default (FLAGDOWN_LOG_FORMAT=json), or slog's key=value text for a human at a terminal
// (text) — at FLAGDOWN_LOG_LEVEL. Logs that concern a ride or a driver carry its id as the
// attribute ride_id or driver_id (RideID, DriverID, EventSubject), so one query finds every line
// about a ride across all parts.
package logging

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/flagdown/flagdown/events"
)

// The formats New writes.
const (
	// FormatJSON writes one JSON object per line (slog.JSONHandler): time, level, msg, attributes.
	FormatJSON = "json"
	// FormatText writes slog's key=value lines (slog.TextHandler), easier to read at a terminal.
	FormatText = "text"
)

// Attribute keys of the ids logs carry.
const (
	// KeyRideID is the attribute key of a ride id.
	KeyRideID = "ride_id"
	// KeyDriverID is the attribute key of a driver id.
	KeyDriverID = "driver_id"
)

// CheckFormat returns an error unless format is FormatJSON, FormatText or empty (FormatJSON).
func CheckFormat(format string) error {
	switch format {
	case "", FormatJSON, FormatText:
		return nil
	}
	return fmt.Errorf("log format %q: want %s or %s", format, FormatJSON, FormatText)
}

// New returns a logger writing records at level or above to w in format (FormatJSON when empty). An
// unknown format is an error (shared/config refuses one at start).
func New(w io.Writer, format string, level slog.Leveler) (*slog.Logger, error) {
	if err := CheckFormat(format); err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if format == FormatText {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}

// Discard returns a logger that writes nothing (commands that open the dependencies only to read).
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// RideID is the ride_id attribute.
func RideID(id string) slog.Attr { return slog.String(KeyRideID, id) }

// DriverID is the driver_id attribute.
func DriverID(id string) slog.Attr { return slog.String(KeyDriverID, id) }

// EventSubject is the attribute naming what a flagdown CloudEvent is about, from its type and
// subject (package events: the subject of a ride event, io.flagdown.ride.*, is the ride id, and of a
// driver event, io.flagdown.driver.*, the driver id): ride_id, driver_id, or else subject.
func EventSubject(eventType, subject string) slog.Attr {
	switch events.SubjectOf(eventType) {
	case events.SubjectRide:
		return RideID(subject)
	case events.SubjectDriver:
		return DriverID(subject)
	}
	return slog.String("subject", subject)
}
