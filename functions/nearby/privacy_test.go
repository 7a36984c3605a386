package function_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	fareestimate "github.com/flagdown/flagdown/functions/fare-estimate"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// attack is one run of the position attack of issue 19 against the real nearby and fare-estimate
// handlers, with every rate limit off: a rider bisects nearby's radius_m from several origins
// around a driver and trilaterates the radii at which he appears; he probes fare-estimate's
// wait_drive_s from several pickups, turns each into a distance and trilaterates them; and he reads
// the position nearby shows. Each of the three estimates is scored by its distance to where the
// driver really is at the end.
type attack struct {
	t      *testing.T
	env    *fntest.Env
	fare   http.Handler
	rider  map[string]string
	cfg    *config.Config
	rng    *rand.Rand
	movers map[string]*mover
	// queries counts the nearby and fare-estimate calls made.
	queries int
}

// mover is a driver that moves moveM metres per simulated second in a fixed direction, one second
// per tick (pings stamped from an hour ago on, so the speed check sees 8 m/s): a tick after each
// bisection and after every fifth probe, about every 15 queries, as fast as a rider could query.
type mover struct {
	id      string
	pos     dispatch.Point
	headRad float64
	at      time.Time
}

const moveM = 8 // metres per tick of a moving driver

func (a *attack) ping(id string, p dispatch.Point, at time.Time) {
	a.t.Helper()
	status, body := fntest.Do(a.t, a.env.Location, http.MethodPost, "/", fntest.JSON{
		"driver_id": id, "lat": p.Lat, "lng": p.Lng, "status": "available", "ts": at.UTC().Format(time.RFC3339Nano),
	}, a.env.As(auth.RoleDriver, id))
	if status != http.StatusOK || body["applied"] != true {
		a.t.Fatalf("ping %s: %d %v", id, status, body)
	}
}

// nearby answers the rider's nearby query at o with radius r metres.
func (a *attack) nearby(o dispatch.Point, r float64) []fntest.JSON {
	a.t.Helper()
	a.queries++
	q := url.Values{"lat": {strconv.FormatFloat(o.Lat, 'f', -1, 64)}, "lng": {strconv.FormatFloat(o.Lng, 'f', -1, 64)},
		"radius_m": {strconv.FormatFloat(r, 'f', 3, 64)}}
	status, body := fntest.Do(a.t, a.env.Nearby, http.MethodGet, "/?"+q.Encode(), nil, a.rider)
	if status != http.StatusOK {
		a.t.Fatalf("nearby: %d %v", status, body)
	}
	var out []fntest.JSON
	for _, d := range body["drivers"].([]any) {
		out = append(out, d.(fntest.JSON))
	}
	return out
}

// driveS answers fare-estimate's wait_drive_s for pickup pu (-1 when no driver is near).
func (a *attack) driveS(pu dispatch.Point) float64 {
	a.t.Helper()
	a.queries++
	do := fntest.Offset(pu, 2000, 0)
	q := url.Values{"pickup": {fmt.Sprintf("%v,%v", pu.Lat, pu.Lng)}, "dropoff": {fmt.Sprintf("%v,%v", do.Lat, do.Lng)}}
	status, body := fntest.Do(a.t, a.fare, http.MethodGet, "/?"+q.Encode(), nil, a.rider)
	if status != http.StatusOK {
		a.t.Fatalf("fare-estimate: %d %v", status, body)
	}
	v, ok := body["wait_drive_s"].(float64)
	if !ok {
		return -1
	}
	return v
}

// around is a point between minM and maxM metres from p in a random direction.
func (a *attack) around(p dispatch.Point, minM, maxM float64) dispatch.Point {
	d, th := minM+a.rng.Float64()*(maxM-minM), a.rng.Float64()*2*math.Pi
	return fntest.Offset(p, d*math.Cos(th), d*math.Sin(th))
}

// bisect finds the least radius_m at which nearby from o lists a driver, halving (0, hi] steps times.
func (a *attack) bisect(o dispatch.Point, hi float64, steps int) float64 {
	lo := 0.0
	for range steps {
		mid := (lo + hi) / 2
		if len(a.nearby(o, mid)) > 0 {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// trilaterate is the least-squares point at distances rs from the points ps (a local flat frame
// around ps[0]).
func trilaterate(ps []dispatch.Point, rs []float64) dispatch.Point {
	ref := ps[0]
	xy := func(p dispatch.Point) (float64, float64) {
		const mPerDeg = dispatch.EarthRadiusM * math.Pi / 180
		return (p.Lng - ref.Lng) * mPerDeg * math.Cos(ref.Lat*math.Pi/180), (p.Lat - ref.Lat) * mPerDeg
	}
	x0, y0 := xy(ps[0])
	var a11, a12, a22, b1, b2 float64
	for i := 1; i < len(ps); i++ {
		xi, yi := xy(ps[i])
		ax, ay := 2*(xi-x0), 2*(yi-y0)
		b := rs[0]*rs[0] - rs[i]*rs[i] + xi*xi - x0*x0 + yi*yi - y0*y0
		a11, a12, a22, b1, b2 = a11+ax*ax, a12+ax*ay, a22+ay*ay, b1+ax*b, b2+ay*b
	}
	det := a11*a22 - a12*a12
	if det == 0 {
		return ref
	}
	x, y := (b1*a22-b2*a12)/det, (a11*b2-a12*b1)/det
	return fntest.Offset(ref, y, x)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// TestRiderCannotLocateADriver runs the bisection/trilateration attack (and fare-estimate's wait
// probing) against 50 random drivers, half of them moving at 8 m/s, and asserts that every estimate
// is off by at least 100 m for the median driver (issue 19's done-when). The drivers are 6 km apart
// so that every answer is about one driver. FLAGDOWN_PRIVACY_QUERIES_PER_DRIVER (default 60) sizes
// it: 200 makes the done-when's 10,000 queries.
func TestRiderCannotLocateADriver(t *testing.T) {
	t.Parallel()
	perDriver := 60
	if s := os.Getenv("FLAGDOWN_PRIVACY_QUERIES_PER_DRIVER"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 20 {
			t.Fatalf("FLAGDOWN_PRIVACY_QUERIES_PER_DRIVER=%q: want a number >= 20", s)
		}
		perDriver = n
	}
	env := fntest.NewEnv(t, func(c *config.Config) {
		c.RateRidesPerMin, c.RatePingsPerMin, c.RateEstimatesPerMin, c.RateNearbyPerMin, c.RatePerIPPerMin = 0, 0, 0, 0, 0 // every limit off
		c.SearchRadiiM = []float64{250, 500, 1000, 2000}                                                                   // the wait's nearest driver: within 2 km
	})
	a := &attack{t: t, env: env, fare: fareestimate.New(env.D.Deps), rider: env.As(auth.RoleRider, "r-attacker"),
		cfg: env.D.Config, rng: rand.New(rand.NewPCG(19, 2)), movers: map[string]*mover{}}

	// 50 drivers, one in each block of a 6 km grid over Manhattan, Brooklyn, Queens and the Bronx,
	// at a random point of the block's central kilometre; every other one moving.
	const drivers = 50
	base := dispatch.Point{Lat: 40.50, Lng: -74.25}
	start := time.Now().Add(-time.Hour)
	truth := map[string]dispatch.Point{}
	var ids []string
	for i := range drivers {
		c := fntest.Offset(base, float64(i/8)*6000+3000, float64(i%8)*6000+3000)
		p := fntest.Offset(c, (a.rng.Float64()-0.5)*1000, (a.rng.Float64()-0.5)*1000)
		id := fmt.Sprintf("d-%02d", i)
		a.ping(id, p, start)
		ids = append(ids, id)
		truth[id] = p
		if i%2 == 1 {
			a.movers[id] = &mover{id: id, pos: p, headRad: a.rng.Float64() * 2 * math.Pi, at: start}
		}
	}

	// Per driver: three origins bisected over (0, 3000] m, and fare-estimate probes from the
	// queries left, three quarters of the budget going to the bisection.
	const origins = 3
	steps := max(6, perDriver*3/4/origins)
	probes := max(3, perDriver-origins*steps)
	errs := map[string][]float64{} // metres, per estimate and per estimate and kind of driver
	began := time.Now()
	for _, id := range ids {
		m := a.movers[id]
		where := func() dispatch.Point {
			if m != nil {
				return m.pos
			}
			return truth[id]
		}
		tick := func() {
			if m != nil {
				m.pos = fntest.Offset(m.pos, moveM*math.Cos(m.headRad), moveM*math.Sin(m.headRad))
				m.at = m.at.Add(time.Second)
				a.ping(m.id, m.pos, m.at)
			}
		}
		var ps []dispatch.Point
		var rs []float64
		var shown dispatch.Point
		for range origins {
			o := a.around(where(), 500, 2000)
			ps = append(ps, o)
			rs = append(rs, a.bisect(o, 3000, steps))
			if ds := a.nearby(o, 3000); len(ds) > 0 {
				shown = dispatch.Point{Lat: ds[0]["lat"].(float64), Lng: ds[0]["lng"].(float64)}
			}
			tick()
		}
		var wps []dispatch.Point
		var wrs []float64
		for i := range probes {
			pu := a.around(where(), 200, 1500)
			if s := a.driveS(pu); s >= 0 {
				wps = append(wps, pu)
				wrs = append(wrs, s*a.cfg.AvgSpeedMPS/a.cfg.RoadFactor)
			}
			if i%5 == 4 {
				tick()
			}
		}
		now := where()
		kind := "stationary"
		if m != nil {
			kind = "moving"
		}
		wait := math.Inf(1) // nothing learnt
		if len(wps) >= 3 {
			wait = dispatch.DistanceM(trilaterate(wps, wrs), now)
		}
		for est, e := range map[string]float64{
			"bisection of radius_m": dispatch.DistanceM(trilaterate(ps, rs), now),
			"wait_drive_s probes":   wait,
			"shown position":        dispatch.DistanceM(shown, now),
		} {
			errs[est] = append(errs[est], e)
			errs[est+", "+kind] = append(errs[est+", "+kind], e)
		}
	}
	t.Logf("%d queries (%d nearby bisection steps and %d fare-estimate probes per driver) in %s",
		a.queries, origins*steps, probes, time.Since(began).Round(time.Millisecond))
	names := make([]string, 0, len(errs))
	for name := range errs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m := median(errs[name])
		t.Logf("median error of %s: %.0f m", name, m)
		if m < 100 {
			t.Errorf("%s locates the median driver to %.1f m, want >= 100 m", name, m)
		}
	}
}
