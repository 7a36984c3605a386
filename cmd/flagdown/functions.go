//go:build !production

package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	accept "github.com/flagdown/flagdown/functions/accept"
	devices "github.com/flagdown/flagdown/functions/devices"
	expirynotification "github.com/flagdown/flagdown/functions/expiry-notification"
	fareestimate "github.com/flagdown/flagdown/functions/fare-estimate"
	hail "github.com/flagdown/flagdown/functions/hail"
	locationupdate "github.com/flagdown/flagdown/functions/location-update"
	match "github.com/flagdown/flagdown/functions/match"
	nearby "github.com/flagdown/flagdown/functions/nearby"
	notify "github.com/flagdown/flagdown/functions/notify"
	opsmap "github.com/flagdown/flagdown/functions/ops-map"
	ordercreate "github.com/flagdown/flagdown/functions/order-create"
	reconcile "github.com/flagdown/flagdown/functions/reconcile"
	ride "github.com/flagdown/flagdown/functions/ride"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/metrics"
)

// functionSet is every function the platform serves, by the name in its gateway path
// /function/<name> (the folder name under functions/). A function that pushes takes the Deps with
// push; any other takes their host dependencies (d.Deps), as its image links them.
var functionSet = []struct {
	name  string
	build func(*app.Deps) http.Handler
}{
	{"location-update", func(d *app.Deps) http.Handler { return locationupdate.New(d) }},
	{"order-create", func(d *app.Deps) http.Handler { return ordercreate.New(d.Deps) }},
	{"match", func(d *app.Deps) http.Handler { return match.New(d) }},
	{"accept", func(d *app.Deps) http.Handler { return accept.New(d.Deps) }},
	{"hail", func(d *app.Deps) http.Handler { return hail.New(d.Deps) }},
	{"ride", func(d *app.Deps) http.Handler { return ride.New(d.Deps) }},
	{"nearby", func(d *app.Deps) http.Handler { return nearby.New(d.Deps) }},
	{"fare-estimate", func(d *app.Deps) http.Handler { return fareestimate.New(d.Deps) }},
	{"expiry-notification", func(d *app.Deps) http.Handler { return expirynotification.New(d.Deps) }},
	{"reconcile", func(d *app.Deps) http.Handler { return reconcile.New(d.Deps) }},
	{"notify", func(d *app.Deps) http.Handler { return notify.New(d) }},
	{"devices", func(d *app.Deps) http.Handler { return devices.New(d) }},
	{"ops-map", func(d *app.Deps) http.Handler { return opsmap.New(d.Deps) }},
}

// gateway mounts every function under /function/<name> like the OpenFaaS gateway: the function
// sees the rest of the path (/function/ride/{id}/start reaches ride as /{id}/start). Each function's
// requests are counted and timed under its name (httpx.Instrument); GET /metrics serves them with
// the platform's own families (extra: the fleet gauges); GET /map redirects to the live operations map.
func gateway(d *app.Deps, extra ...prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	for _, fn := range functionSet {
		h := httpx.Instrument(fn.name, fn.build(d))
		prefix := "/function/" + fn.name
		mux.Handle(prefix, http.StripPrefix(prefix, h))
		mux.Handle(prefix+"/", http.StripPrefix(prefix, h))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, r, d.Log, dispatch.NotFound("function or path", r.URL.Path))
	})
	// The live operations map at a short address (the function itself is /function/ops-map/).
	mux.Handle("GET /map", http.RedirectHandler("/function/ops-map/", http.StatusFound))
	mux.Handle("GET /metrics", metrics.Handler(extra...))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := d.Ready(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"unavailable"}` + "\n"))
			return
		}
		_, _ = w.Write([]byte(`{"status":"ready"}` + "\n"))
	})
	return mux
}
