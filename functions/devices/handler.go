// Package function is the devices function: a rider's or driver's app registers the phone's push
// token for the mobile push fallback (shared/push SNS), used when he has no live WebSocket.
//
//	PUT    /function/devices  {"platform": "fcm"|"apns"|"apns_sandbox", "token": "..."}  register (200)
//	DELETE /function/devices  {"token": "..."}                                      unregister (200)
//	POST   /function/devices/ticket                                                  a WebSocket connect ticket (200 TicketAnswer)
//
// Callers need a driver or rider token (auth.Require) and register their own phone only: the device
// belongs to the token's role and subject. With no SNS platform application configured the
// registration answers 400 naming platform (push to phones is not configured on this server).
package function

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/push"
	"github.com/flagdown/flagdown/shared/ratelimit"
)

// MaxBodyBytes is the largest request body read: an FCM token of push.MaxFCMTokenBytes and room.
const MaxBodyBytes = push.MaxFCMTokenBytes + 1024

// Function serves device registration.
type Function struct {
	d *app.Deps
	h http.Handler
}

// New returns the function over d; it requires a driver or rider token.
func New(d *app.Deps) *Function {
	f := &Function{d: d}
	f.h = auth.Require(d.Auth, d.Log, http.HandlerFunc(f.serve), auth.RoleDriver, auth.RoleRider)
	return f
}

var lazy = app.NewLazy(func(d *app.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// budget refuses a registration of token by who past his FLAGDOWN_RATE_DEVICES_PER_MIN or his
// client IP's FLAGDOWN_RATE_PER_IP_PER_MIN (429), or of one more device than
// FLAGDOWN_MAX_DEVICES_PER_USER (409 too_many_devices; re-registering one of his devices is fine):
// every push fans out to all of a user's devices.
func (f *Function) budget(r *http.Request, who auth.Identity, token string) error {
	ctx := r.Context()
	if err := f.d.Limiter().AllowCaller(ctx, ratelimit.Devices, string(who.Role)+":"+who.Subject, "sub",
		httpx.ClientIP(r, f.d.Config.TrustedProxyHops)); err != nil {
		return err
	}
	devs, err := pgstore.EnabledDevices(ctx, f.d.DB.Pool, string(who.Role), who.Subject)
	if err != nil {
		return err
	}
	for _, d := range devs {
		if d.Token == strings.TrimSpace(token) {
			return nil
		}
	}
	if max := f.d.Config.MaxDevicesPerUser; len(devs) >= max {
		return dispatch.Conflict(dispatch.ReasonTooManyDevices,
			fmt.Sprintf("at most %d devices per user (FLAGDOWN_MAX_DEVICES_PER_USER): remove one first", max)).With("max_devices", max)
	}
	return nil
}

// ServeHTTP handles PUT and DELETE /function/devices, behind auth.Require.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.h.ServeHTTP(w, r) }

// RegisterRequest is the body of PUT.
type RegisterRequest struct {
	Platform string `json:"platform"`
	Token    string `json:"token"`
}

// UnregisterRequest is the body of DELETE.
type UnregisterRequest struct {
	Token string `json:"token"`
}

// DeviceView is the answer of PUT: the registered device.
type DeviceView struct {
	Platform string `json:"platform"`
	Enabled  bool   `json:"enabled"`
}

// TicketAnswer is the answer of POST /ticket: a connect ticket for the caller's WebSocket
// (ws://…/ws?ticket=<ticket>, or the API Gateway URL with ?ticket=), good for one connect until
// ExpiresAt (push.TicketTTL at most, never past the token it was minted with).
type TicketAnswer struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ticket mints a connect ticket for the caller, bound to his role, subject and token expiry.
// It spends one unit of his FLAGDOWN_RATE_CONNECTS_PER_MIN and his client IP's
// FLAGDOWN_RATE_PER_IP_PER_MIN budgets (the connect it opens spends none).
func (f *Function) ticket(w http.ResponseWriter, r *http.Request, id auth.Identity) {
	httpx.Serve(w, r, f.d.Log, http.MethodPost, func() (int, any, error) {
		tok := strings.TrimSpace(r.Header.Get("Authorization"))
		if len(tok) > 7 && strings.EqualFold(tok[:7], "Bearer ") {
			tok = strings.TrimSpace(tok[7:])
		}
		exp, err := auth.TokenExpiry(tok)
		if err != nil {
			return 0, nil, err
		}
		u := push.User{Role: id.Role, ID: id.Subject}
		if err := f.d.Limiter().AllowCaller(r.Context(), ratelimit.Connects, u.String(), "sub",
			httpx.ClientIP(r, f.d.Config.TrustedProxyHops)); err != nil {
			return 0, nil, err
		}
		t, until, err := f.d.Push().Registry.MintTicket(r.Context(), u, exp)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, TicketAnswer{Ticket: t, ExpiresAt: until.UTC()}, nil
	})
}

func (f *Function) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/ticket" {
		id, err := auth.Must(r)
		if err != nil {
			httpx.WriteError(w, r, f.d.Log, err)
			return
		}
		f.ticket(w, r, id)
		return
	}
	if r.URL.Path != "" && r.URL.Path != "/" {
		httpx.WriteError(w, r, f.d.Log, dispatch.NotFound("path", r.URL.Path))
		return
	}
	id, err := auth.Must(r)
	if err != nil {
		httpx.WriteError(w, r, f.d.Log, err)
		return
	}
	switch r.Method {
	case http.MethodPut:
		httpx.Serve(w, r, f.d.Log, http.MethodPut, func() (int, any, error) {
			var req RegisterRequest
			if err := httpx.DecodeJSON(w, r, MaxBodyBytes, &req); err != nil {
				return 0, nil, err
			}
			if err := f.budget(r, id, req.Token); err != nil {
				return 0, nil, err
			}
			dev, err := f.d.SNS().RegisterDevice(r.Context(), id.Role, id.Subject, push.Platform(req.Platform), req.Token)
			if err != nil {
				return 0, nil, err
			}
			return http.StatusOK, DeviceView{Platform: dev.Platform, Enabled: true}, nil
		})
	case http.MethodDelete:
		httpx.Serve(w, r, f.d.Log, http.MethodDelete, func() (int, any, error) {
			var req UnregisterRequest
			if err := httpx.DecodeJSON(w, r, MaxBodyBytes, &req); err != nil {
				return 0, nil, err
			}
			found, err := f.d.SNS().UnregisterDevice(r.Context(), id.Role, id.Subject, req.Token)
			if err != nil {
				return 0, nil, err
			}
			return http.StatusOK, map[string]bool{"removed": found}, nil
		})
	default:
		httpx.MethodNotAllowed(w, http.MethodPut, http.MethodDelete)
	}
}
