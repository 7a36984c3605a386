package push

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// TicketTTL is how long a connect ticket may be redeemed after it was minted (never past the
// token it was minted with).
const TicketTTL = 30 * time.Second

// HeaderClientTicket carries the phone's connect ticket on the $connect call (the gateway maps
// the upgrade request's ticket query parameter to it).
const HeaderClientTicket = "X-Flagdown-Client-Ticket"

// ticketBytes is the entropy of a ticket: 32 random bytes (256 bits), base64url.
const ticketBytes = 32

// Connect tickets replace a token in the WebSocket URL (a URL ends up in access logs and
// browser history): a phone POSTs for one with its token in the Authorization header, then opens
// the socket with ?ticket=<ticket>. A ticket is bound to the user and the expiry of the token it
// was minted with, lasts TicketTTL and opens one socket: redeeming it deletes it (GETDEL).
//
// Key (under the deployment's prefix): S ws:ticket:<SHA-256 of the ticket, hex> = "<role>:<id>
// <token expiry, unix ms>", PX min(TicketTTL, the token's remaining life). Only the hash is
// stored, so whoever reads Redis cannot connect as anyone.
func (r *Registry) ticketKey(ticket string) string {
	h := sha256.Sum256([]byte(ticket))
	return r.prefix + "ws:ticket:" + hex.EncodeToString(h[:])
}

// MintTicket returns a new connect ticket for u, whose token expires at tokenExpiry, and when the
// ticket itself expires.
func (r *Registry) MintTicket(ctx context.Context, u User, tokenExpiry time.Time) (string, time.Time, error) {
	now := r.now()
	exp := now.Add(TicketTTL)
	if tokenExpiry.Before(exp) {
		exp = tokenExpiry
	}
	if !exp.After(now) {
		return "", time.Time{}, &dispatch.Error{Code: dispatch.CodeUnauthenticated, Field: "Authorization", Message: "the token has expired"}
	}
	var b [ticketBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	ticket := base64.RawURLEncoding.EncodeToString(b[:])
	v := u.String() + " " + strconv.FormatInt(tokenExpiry.UnixMilli(), 10)
	if err := r.rdb.Set(ctx, r.ticketKey(ticket), v, exp.Sub(now)).Err(); err != nil {
		return "", time.Time{}, unavailable(err)
	}
	return ticket, exp, nil
}

// RedeemTicket consumes ticket and returns its user and the expiry of the token it was minted
// with. A ticket unknown, already used or expired is a CodeUnauthenticated error naming
// HeaderClientTicket.
func (r *Registry) RedeemTicket(ctx context.Context, ticket string) (User, time.Time, error) {
	refused := &dispatch.Error{Code: dispatch.CodeUnauthenticated, Field: HeaderClientTicket,
		Message: "the connect ticket is unknown, used or expired: mint a new one (POST /function/devices/ticket)"}
	if ticket == "" || len(ticket) > 2*ticketBytes {
		return User{}, time.Time{}, refused
	}
	v, err := r.rdb.GetDel(ctx, r.ticketKey(ticket)).Result()
	if errors.Is(err, redis.Nil) {
		return User{}, time.Time{}, refused
	}
	if err != nil {
		return User{}, time.Time{}, unavailable(err)
	}
	who, ms, ok := strings.Cut(v, " ")
	role, id, ok2 := strings.Cut(who, ":")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || !ok2 || err != nil {
		return User{}, time.Time{}, refused
	}
	exp := time.UnixMilli(n)
	if !exp.After(r.now()) {
		return User{}, time.Time{}, refused
	}
	return User{Role: auth.Role(role), ID: id}, exp, nil
}
