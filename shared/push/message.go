package push

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// MessageType names what a pushed message says. Clients switch on it and ignore types they do not
// know (new types may be added; a changed payload is a new type).
type MessageType string

// The message types flagdown pushes, and who receives each.
const (
	// TypeOffer (driver): the ride is offered to you; answer before data.expires_at. Data: dispatch.LiveOffer,
	// the same object a ping answer carries in "offer".
	TypeOffer MessageType = "offer"
	// TypeOfferExpired (driver): your offer's window passed; the ride goes to someone else. Data: OfferEnd.
	TypeOfferExpired MessageType = "offer.expired"
	// TypeOfferWithdrawn (driver): the rider cancelled the ride while it was offered to you. Data: OfferEnd.
	TypeOfferWithdrawn MessageType = "offer.withdrawn"
	// TypeRideStatus (rider; the driver too when someone else changed his ride): the ride's status
	// changed. Data: RideStatus.
	TypeRideStatus MessageType = "ride.status"
	// TypeDriverPosition (rider): where your driver is, while the ride is ACCEPTED or IN_PROGRESS, at
	// most once per FLAGDOWN_PUSH_POSITION_INTERVAL. Data: DriverPosition.
	TypeDriverPosition MessageType = "driver.position"
)

// Message is one pushed message, the JSON object sent as one WebSocket text message (and as the data
// of a mobile push). ID is stable for what it says: the same offer, status change or position pushed
// twice (a redelivered event, a sync after reconnect, a second device) carries the same id, so a
// client drops what it has already seen by id.
type Message struct {
	ID   string      `json:"id"`
	Type MessageType `json:"type"`
	// At is when what the message says happened (UTC): the offer, the status change, the GPS fix.
	At   time.Time `json:"at"`
	Data any       `json:"data"`
}

// Encode returns m as JSON.
func (m Message) Encode() ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("push: encode %s message: %w", m.Type, err)
	}
	return b, nil
}

// OfferEnd is the data of TypeOfferExpired and TypeOfferWithdrawn.
type OfferEnd struct {
	RideID  string `json:"ride_id"`
	OfferID string `json:"offer_id"`
}

// RideStatus is the data of TypeRideStatus.
type RideStatus struct {
	RideID string              `json:"ride_id"`
	Status dispatch.RideStatus `json:"status"`
	// Version is rides.version after the change: a client keeps the status of the highest version it
	// has seen and drops older ones, so reordered messages cannot move a ride backwards on screen.
	Version int64 `json:"version"`
	// DriverID is the ride's driver after the change, empty when none (REQUESTED, UNMATCHED).
	DriverID string `json:"driver_id,omitempty"`
	// By is who caused the change (rider, driver, system), when known.
	By string `json:"by,omitempty"`
	// Reason is why, when known (e.g. driver_offline for a re-opened ride, the cancel reason).
	Reason string `json:"reason,omitempty"`
}

// DriverPosition is the data of TypeDriverPosition.
type DriverPosition struct {
	RideID   string         `json:"ride_id"`
	DriverID string         `json:"driver_id"`
	Position dispatch.Point `json:"position"`
	// HeadingDeg is degrees clockwise from north (0..360), absent when unknown.
	HeadingDeg *float64 `json:"heading_deg,omitempty"`
}

// OfferMessage is the TypeOffer message of o. Its id depends on the offer alone.
func OfferMessage(o dispatch.LiveOffer, offeredAt time.Time) Message {
	return Message{ID: "offer-" + o.OfferID, Type: TypeOffer, At: offeredAt.UTC(), Data: o}
}

// OfferEndMessage is the TypeOfferExpired or TypeOfferWithdrawn message of offerID.
func OfferEndMessage(t MessageType, rideID, offerID string, at time.Time) Message {
	return Message{ID: string(t) + "-" + offerID, Type: t, At: at.UTC(), Data: OfferEnd{RideID: rideID, OfferID: offerID}}
}

// RideStatusMessage is the TypeRideStatus message of s. Its id depends on the ride and version alone.
func RideStatusMessage(s RideStatus, at time.Time) Message {
	return Message{ID: fmt.Sprintf("ride-%s-%d-%s", s.RideID, s.Version, s.Status), Type: TypeRideStatus, At: at.UTC(), Data: s}
}

// DriverPositionMessage is the TypeDriverPosition message of p, fixed at at.
func DriverPositionMessage(p DriverPosition, at time.Time) Message {
	return Message{ID: fmt.Sprintf("pos-%s-%d", p.RideID, at.UnixMilli()), Type: TypeDriverPosition, At: at.UTC(), Data: p}
}
