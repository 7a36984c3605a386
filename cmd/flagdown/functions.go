package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

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
	"github.com/flagdown/flagdown/shared/internalauth"
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

// cron calls url with POST every interval until ctx ends, like the flagdown-reconcile-cron CronJob
// of a cluster (`flagdown cron`), with the internal token of keys (Authorization: Bearer);
// failures are logged and the next tick tries again.
func cron(ctx context.Context, url string, interval time.Duration, keys *internalauth.Tokens, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		status, body, err := callInternal(ctx, http.DefaultClient, url, keys)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("cron call failed", "url", url, "err", err)
		case err == nil && status/100 != 2:
			log.Error("cron call failed", "url", url, "status", status, "body", string(body))
		}
	}
}

// callInternal POSTs an empty body to url with the internal token of keys and returns the
// status and the first 4 KiB of the answer.
func callInternal(ctx context.Context, hc *http.Client, url string, keys *internalauth.Tokens) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if err := keys.SetBearer(req); err != nil {
		return 0, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, body, nil
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
