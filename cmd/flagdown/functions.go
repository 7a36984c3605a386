package main

import (
	"net/http"

	accept "github.com/flagdown/flagdown/functions/accept"
	locationupdate "github.com/flagdown/flagdown/functions/location-update"
	match "github.com/flagdown/flagdown/functions/match"
	nearby "github.com/flagdown/flagdown/functions/nearby"
	ordercreate "github.com/flagdown/flagdown/functions/order-create"
	ride "github.com/flagdown/flagdown/functions/ride"
	"github.com/flagdown/flagdown/shared/app"
)

// functionSet is every function the platform serves, by the name in its gateway path
// /function/<name> (the folder name under functions/).
var functionSet = []struct {
	name  string
	build func(*app.Deps) http.Handler
}{
	{"location-update", func(d *app.Deps) http.Handler { return locationupdate.New(d) }},
	{"order-create", func(d *app.Deps) http.Handler { return ordercreate.New(d) }},
	{"match", func(d *app.Deps) http.Handler { return match.New(d) }},
	{"accept", func(d *app.Deps) http.Handler { return accept.New(d) }},
	{"ride", func(d *app.Deps) http.Handler { return ride.New(d) }},
	{"nearby", func(d *app.Deps) http.Handler { return nearby.New(d) }},
}

// gateway mounts every function under /function/<name> like the OpenFaaS gateway: the function
// sees the rest of the path (/function/ride/{id}/start reaches ride as /{id}/start).
func gateway(d *app.Deps) *http.ServeMux {
	mux := http.NewServeMux()
	for _, fn := range functionSet {
		h := fn.build(d)
		prefix := "/function/" + fn.name
		mux.Handle(prefix, http.StripPrefix(prefix, h))
		mux.Handle(prefix+"/", http.StripPrefix(prefix, h))
	}
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
