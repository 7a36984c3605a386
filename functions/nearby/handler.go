// Package function is the nearby function: available drivers around a point, for the rider's map.
//
// GET /function/nearby?lat=40.75&lng=-73.98&radius_m=1000 answers the nearest available drivers,
// at most FLAGDOWN_NEARBY_MAX_COUNT of them, within radius_m metres (default 1000, at most
// FLAGDOWN_NEARBY_MAX_RADIUS_M).
//
// Callers (auth.Require): ops see the exact view (driver ids, exact positions and distances). A
// rider sees the rider view (dispatch.RiderCell): no driver ids, each position the centre of the
// grid cell of about dispatch.RiderCellM × RiderCellM metres the driver is in, the distance to that
// centre, and radius_m rounded up to dispatch.RiderRadiusM and applied to that distance. His answer
// is a function of the cells alone, so no sequence of queries (bisecting radius_m from several
// points included) follows one driver or locates him closer than his cell (docs/security.md).
// Each call spends one unit of the caller's and of his client IP's FLAGDOWN_RATE_NEARBY_PER_MIN /
// FLAGDOWN_RATE_PER_IP_PER_MIN budgets (429 with Retry-After past them).
package function

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/ratelimit"
)

// DefaultRadiusM is the search radius in metres when radius_m is omitted.
const DefaultRadiusM = 1000

// Function serves nearby queries.
type Function struct {
	d *host.Deps
	h http.Handler
}

// New returns the function over d; it requires a rider or ops token.
func New(d *host.Deps) *Function {
	f := &Function{d: d}
	f.h = auth.Require(d.Auth, d.Log, http.HandlerFunc(f.serve), auth.RoleRider, auth.RoleOps)
	return f
}

var lazy = host.NewLazy(func(d *host.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// Driver is one nearby driver.
type Driver struct {
	// DriverID is shown to ops only.
	DriverID string `json:"driver_id,omitempty"`
	// DistanceM is the distance from the query point in metres (for riders: to the cell centre).
	DistanceM float64 `json:"distance_m"`
	Lat       float64 `json:"lat"`
	Lng       float64 `json:"lng"`
}

// Response lists drivers nearest first.
type Response struct {
	Drivers []Driver `json:"drivers"`
}

// ServeHTTP handles GET /function/nearby.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.h.ServeHTTP(w, r) }

func (f *Function) serve(w http.ResponseWriter, r *http.Request) {
	httpx.Serve(w, r, f.d.Log, http.MethodGet, func() (int, any, error) {
		who, err := auth.Must(r)
		if err != nil {
			return 0, nil, err
		}
		p, radius, err := f.parse(r.URL.Query())
		if err != nil {
			return 0, nil, err
		}
		if err := f.d.Limiter().AllowCaller(r.Context(), ratelimit.NearbyQueries, who.Subject, "sub",
			httpx.ClientIP(r, f.d.Config.TrustedProxyHops)); err != nil {
			return 0, nil, err
		}
		rider := who.Role != auth.RoleOps
		search := radius
		if rider {
			// Every driver whose cell centre is within the rounded radius: the filter is applied to
			// the cell centre below, never to the exact position.
			radius = dispatch.RiderRadiusM(radius)
			search = radius + dispatch.RiderCellHalfDiagonalM
		}
		hits, err := f.d.Redis.Nearby(r.Context(), p, search, f.d.Config.NearbyMaxCount)
		if err != nil {
			return 0, nil, err
		}
		// A driver whose heartbeat expired stays in the GEO set until the expiry is handled (or
		// reconcile finds him), so check each hit's heartbeat and state as matching does.
		ids := make([]string, len(hits))
		for i, h := range hits {
			ids[i] = h.DriverID
		}
		infos, err := f.d.Redis.DriverInfos(r.Context(), ids)
		if err != nil {
			return 0, nil, err
		}
		out := Response{Drivers: make([]Driver, 0, len(hits))}
		for i, h := range hits {
			if info := infos[i]; !info.Alive || info.Status != dispatch.DriverAvailable || info.RideID != "" {
				continue
			}
			if rider {
				c, d := dispatch.RiderCell(h.Position), dispatch.RiderDistanceM(p, h.Position)
				if d <= radius {
					out.Drivers = append(out.Drivers, Driver{DistanceM: d, Lat: c.Lat, Lng: c.Lng})
				}
				continue
			}
			out.Drivers = append(out.Drivers, Driver{DriverID: h.DriverID, DistanceM: math.Round(h.DistanceM*10) / 10, Lat: h.Position.Lat, Lng: h.Position.Lng})
		}
		if rider {
			// Nearest cell first; the exact order inside a cell would say more than the cell.
			sort.Slice(out.Drivers, func(i, j int) bool {
				a, b := out.Drivers[i], out.Drivers[j]
				if a.DistanceM != b.DistanceM {
					return a.DistanceM < b.DistanceM
				}
				if a.Lat != b.Lat {
					return a.Lat < b.Lat
				}
				return a.Lng < b.Lng
			})
		}
		return http.StatusOK, out, nil
	})
}

func (f *Function) parse(q url.Values) (dispatch.Point, float64, error) {
	for k := range q {
		if k != "lat" && k != "lng" && k != "radius_m" {
			return dispatch.Point{}, 0, dispatch.Invalid(k, "is not a known parameter (lat, lng, radius_m)")
		}
	}
	num := func(name string, required bool, def float64) (float64, error) {
		vs, ok := q[name]
		if !ok {
			if required {
				return 0, dispatch.Invalid(name, "is required")
			}
			return def, nil
		}
		if len(vs) != 1 {
			return 0, dispatch.Invalid(name, "must be given once")
		}
		v, err := strconv.ParseFloat(vs[0], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, dispatch.Invalid(name, "must be a finite decimal number")
		}
		return v, nil
	}
	lat, err := num("lat", true, 0)
	if err != nil {
		return dispatch.Point{}, 0, err
	}
	lng, err := num("lng", true, 0)
	if err != nil {
		return dispatch.Point{}, 0, err
	}
	p := dispatch.Point{Lat: lat, Lng: lng}
	if err := dispatch.ValidatePoint("", p); err != nil {
		return dispatch.Point{}, 0, err
	}
	radius, err := num("radius_m", false, DefaultRadiusM)
	if err != nil {
		return dispatch.Point{}, 0, err
	}
	if radius <= 0 || radius > f.d.Config.NearbyMaxRadiusM {
		return dispatch.Point{}, 0, dispatch.Invalid("radius_m", fmt.Sprintf("must be greater than 0 and at most %v metres", f.d.Config.NearbyMaxRadiusM))
	}
	return p, radius, nil
}
