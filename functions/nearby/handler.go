// Package function is the nearby function: available drivers around a point, for the rider's map.
//
// GET /function/nearby?lat=40.75&lng=-73.98&radius_m=1000 answers the nearest available drivers,
// at most FLAGDOWN_NEARBY_MAX_COUNT of them, within radius_m metres (default 1000, at most
// FLAGDOWN_NEARBY_MAX_RADIUS_M).
//
// Callers (auth.Require): ops see the exact view (driver ids, exact positions and distances). A
// rider sees no driver ids, and each position is the centre of the grid cell of about GridM ×
// GridM metres (see Coarse) the driver is in, with the distance to that centre, so repeated queries
// cannot follow one driver or locate him closer than his cell.
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
)

// DefaultRadiusM is the search radius in metres when radius_m is omitted.
const DefaultRadiusM = 1000

// GridM is the side, in metres, of the grid cells rider answers are rounded to.
const GridM = 150

// Coarse returns the centre of the cell of a grid of about GridM metres the point p lies in:
// latitude in steps of GridM metres of meridian, longitude in steps of GridM metres along the
// parallel of the cell's latitude band (so a cell stays about GridM wide away from the equator).
func Coarse(p dispatch.Point) dispatch.Point {
	const mPerDeg = dispatch.EarthRadiusM * math.Pi / 180
	latStep := GridM / mPerDeg
	lat := (math.Floor(p.Lat/latStep) + 0.5) * latStep
	lngStep := GridM / (mPerDeg * math.Cos(lat*math.Pi/180))
	lng := (math.Floor(p.Lng/lngStep) + 0.5) * lngStep
	return dispatch.Point{Lat: math.Round(lat*1e6) / 1e6, Lng: math.Round(lng*1e6) / 1e6}
}

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
		hits, err := f.d.Redis.Nearby(r.Context(), p, radius, f.d.Config.NearbyMaxCount)
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
			if who.Role != auth.RoleOps {
				c := Coarse(h.Position)
				out.Drivers = append(out.Drivers, Driver{DistanceM: math.Round(dispatch.DistanceM(p, c)), Lat: c.Lat, Lng: c.Lng})
				continue
			}
			out.Drivers = append(out.Drivers, Driver{DriverID: h.DriverID, DistanceM: math.Round(h.DistanceM*10) / 10, Lat: h.Position.Lat, Lng: h.Position.Lng})
		}
		if who.Role != auth.RoleOps {
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
