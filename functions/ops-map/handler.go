// Package function is the ops-map function: the live operations map. It serves, under
// /function/ops-map/ (flagdown dev also at /map):
//
//	GET /                 the page (HTML, CSS and JavaScript embedded, no external resource: no CDN,
//	                      no map tiles; the backdrop is a density image of real trips, see assets/)
//	GET /backdrop.png     the backdrop, and /backdrop.json its bounds (WGS84 degrees) and size
//	GET /snapshot         the latest snapshot as JSON (opsview.Snapshot); ?seq=N one of the last
//	                      opsview.DefaultKeep snapshots of this replica by its number
//	GET /stream           server-sent events (text/event-stream): an event "snapshot" (id = seq) a
//	                      second while the state changes, a comment line otherwise; the stream ends
//	                      after StreamMax and the page reconnects
//	GET /rides/{id}       a ride's timeline (opsview.Timeline) from PostgreSQL
//
// The page and its assets hold no data and need no token. Every data endpoint requires an `ops`
// token (auth.Require): Authorization: Bearer <JWT>.
//
// Token handover. Browsers' EventSource cannot set an Authorization header, so the page does not
// use it: it reads the stream with fetch() and a ReadableStream, sending the header like every other
// call, and parses the server-sent events itself. The alternatives were refused: a token in the
// query string ends up in access logs and browser history, and a cookie would make every data
// endpoint answer cross-site requests (CSRF) and outlive the tab. The page gets the token from a
// field the operator pastes it into, or from the URL fragment (#token=...: a fragment is never sent
// to a server, so no log sees it), keeps it in sessionStorage (this tab only, gone when it closes)
// and takes the fragment out of the address bar at once. Nothing here logs a token. A token is
// checked when a stream opens; as a stream lasts at most StreamMax, an expired token stops the map
// within that time (the page then asks for a new one).
//
// The read model (the queries, and one snapshot a second shared by every viewer of a replica) is
// shared/opsview; this handler only routes and encodes.
package function

//go:generate go run ../../internal/backdropgen -trips ../../testdata/trips.csv -out assets/backdrop.png -meta assets/backdrop.json

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/opsview"
)

// StreamMax is how long one stream lasts before the server ends it (the page reconnects), so a
// replica's connections turn over and no write deadline is held open for ever.
const StreamMax = 5 * time.Minute

// streamWriteTimeout bounds each write of the stream (a stuck client is dropped).
const streamWriteTimeout = 10 * time.Second

//go:embed assets
var assets embed.FS

// Function serves the live operations map.
type Function struct {
	d    *host.Deps
	hub  *opsview.Hub
	read *opsview.Reader
	mux  *http.ServeMux
	page []byte
	csp  string

	mu    sync.Mutex
	stops map[*http.Server]chan struct{}
}

// New returns the function over d; its data endpoints require an ops token.
func New(d *host.Deps) *Function {
	f := &Function{d: d, read: opsview.New(d.DB, d.Redis), stops: map[*http.Server]chan struct{}{}}
	f.hub = opsview.NewHub(f.read.Snapshot)
	f.page, f.csp = buildPage()
	ops := func(h http.HandlerFunc) http.Handler { return auth.Require(d.Auth, d.Log, h, auth.RoleOps) }
	m := http.NewServeMux()
	m.HandleFunc("/{$}", f.servePage)
	m.HandleFunc("/backdrop.png", f.asset("assets/backdrop.png", "image/png"))
	m.HandleFunc("/backdrop.json", f.asset("assets/backdrop.json", "application/json"))
	m.Handle("/snapshot", ops(f.snapshot))
	m.Handle("/stream", ops(f.stream))
	m.Handle("/rides/{id}", ops(f.timeline))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, r, d.Log, dispatch.NotFound("path", r.URL.Path))
	})
	f.mux = m
	return f
}

var lazy = host.NewLazy(func(d *host.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// ServeHTTP routes a request; the gateway's /function/ops-map prefix is already stripped (an empty
// path is the page).
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "" {
		r.URL.Path = "/"
	}
	f.mux.ServeHTTP(w, r)
}

// buildPage inlines the stylesheet and the script into the page and returns it with a
// Content-Security-Policy that allows exactly those two (by hash) and same-origin fetches and
// images, nothing else.
func buildPage() ([]byte, string) {
	read := func(name string) string {
		b, err := assets.ReadFile(name)
		if err != nil {
			panic(err) // embedded at build time
		}
		return string(b)
	}
	css, js := read("assets/map.css"), read("assets/map.js")
	page := strings.Replace(read("assets/index.html"), "/*MAP_CSS*/", css, 1)
	page = strings.Replace(page, "/*MAP_JS*/", js, 1)
	hash := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return "'sha256-" + base64.StdEncoding.EncodeToString(h[:]) + "'"
	}
	csp := fmt.Sprintf("default-src 'none'; script-src %s; style-src %s; img-src 'self'; connect-src 'self'; "+
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'", hash(js), hash(css))
	return []byte(page), csp
}

func (f *Function) servePage(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		httpx.MethodNotAllowed(w, http.MethodGet, http.MethodHead)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", f.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(f.page)
}

func (f *Function) asset(name, contentType string) http.HandlerFunc {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			httpx.MethodNotAllowed(w, http.MethodGet, http.MethodHead)
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write(b)
	}
}

// snapshot answers GET /snapshot[?seq=N].
func (f *Function) snapshot(w http.ResponseWriter, r *http.Request) {
	httpx.Serve(w, r, f.d.Log, http.MethodGet, func() (int, any, error) {
		q := r.URL.Query()
		for k := range q {
			if k != "seq" {
				return 0, nil, dispatch.Invalid(k, "is not a known parameter (seq)")
			}
		}
		if vs, ok := q["seq"]; ok {
			seq, err := strconv.ParseInt(vs[0], 10, 64)
			if len(vs) != 1 || err != nil || seq < 1 {
				return 0, nil, dispatch.Invalid("seq", "must be given once, a whole number of at least 1")
			}
			fr, ok := f.hub.BySeq(seq)
			if !ok {
				return 0, nil, dispatch.NotFound("snapshot", vs[0])
			}
			return http.StatusOK, rawJSON(fr.JSON), nil
		}
		fr, err := f.hub.Latest(r.Context())
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, rawJSON(fr.JSON), nil
	})
}

// rawJSON is an already encoded JSON value (httpx.WriteJSON writes it as it is).
type rawJSON []byte

// MarshalJSON returns the value.
func (b rawJSON) MarshalJSON() ([]byte, error) { return b, nil }

// stream answers GET /stream with server-sent events.
func (f *Function) stream(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		httpx.MethodNotAllowed(w, http.MethodGet)
		return
	}
	ctx := r.Context()
	first, err := f.hub.Latest(ctx)
	if err != nil {
		httpx.WriteError(w, r, f.d.Log, err)
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx-style proxies: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	stopping := f.stopping(r)
	end := time.NewTimer(StreamMax)
	defer end.Stop()
	tick := time.NewTicker(f.hub.Interval)
	defer tick.Stop()
	var last int64
	fr := first
	for {
		var msg string
		switch {
		case err != nil:
			// The stores failed this tick: say so, keep the stream (the next tick may succeed).
			msg = fmt.Sprintf("event: unavailable\ndata: {\"code\":%q}\n\n", dispatch.ErrorCode(err))
			f.d.Log.Warn("ops map snapshot failed", "err", err)
		case fr.Snapshot.Seq != last:
			last = fr.Snapshot.Seq
			msg = "id: " + strconv.FormatInt(last, 10) + "\nevent: snapshot\ndata: " + string(fr.JSON) + "\n\n"
		default:
			msg = ": unchanged\n\n"
		}
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, werr := w.Write([]byte(msg)); werr != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-stopping:
			return
		case <-tick.C:
		}
		fr, err = f.hub.Latest(ctx)
	}
}

// stopping returns a channel closed when the server serving r begins to shut down: Shutdown waits
// for every active request, and an open map would hold it for the rest of its stream (the page
// reconnects to another replica). It is nil (never closed) outside an http.Server.
func (f *Function) stopping(r *http.Request) <-chan struct{} {
	srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if srv == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.stops[srv]
	if !ok {
		ch = make(chan struct{})
		f.stops[srv] = ch
		srv.RegisterOnShutdown(func() { close(ch) })
	}
	return ch
}

// timeline answers GET /rides/{id}.
func (f *Function) timeline(w http.ResponseWriter, r *http.Request) {
	httpx.Serve(w, r, f.d.Log, http.MethodGet, func() (int, any, error) {
		t, err := f.read.Timeline(r.Context(), r.PathValue("id"))
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, t, nil
	})
}
