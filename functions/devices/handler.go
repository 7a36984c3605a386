// Package function is the devices function: a rider's or driver's app registers the phone's push
// token for the mobile push fallback (shared/push SNS), used when he has no live WebSocket.
//
//	PUT    /function/devices  {"platform": "fcm"|"apns"|"apns_sandbox", "token": "..."}  register (200)
//	DELETE /function/devices  {"token": "..."}                                      unregister (200)
//
// Callers need a driver or rider token (auth.Require) and register their own phone only: the device
// belongs to the token's role and subject. With no SNS platform application configured the
// registration answers 400 naming platform (push to phones is not configured on this server).
package function

import (
	"net/http"

	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/push"
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

func (f *Function) serve(w http.ResponseWriter, r *http.Request) {
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
