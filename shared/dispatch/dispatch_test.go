package dispatch_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/flagdown/flagdown/shared/dispatch"
)

func TestTransitionTable(t *testing.T) {
	t.Parallel()
	statuses := []dispatch.RideStatus{dispatch.RideRequested, dispatch.RideAccepted, dispatch.RideInProgress,
		dispatch.RideCompleted, dispatch.RideCancelled, dispatch.RideUnmatched}
	actions := []dispatch.Action{dispatch.ActionAccept, dispatch.ActionDecline, dispatch.ActionStart,
		dispatch.ActionComplete, dispatch.ActionCancel}
	actors := []dispatch.Actor{dispatch.ActorRider, dispatch.ActorDriver, dispatch.ActorSystem}
	// legal lists every allowed (from, action, actor) and where it leads; everything else is illegal.
	legal := map[string]dispatch.RideStatus{
		"REQUESTED accept driver":     dispatch.RideAccepted,
		"REQUESTED decline driver":    dispatch.RideRequested,
		"ACCEPTED start driver":       dispatch.RideInProgress,
		"IN_PROGRESS complete driver": dispatch.RideCompleted,
		"REQUESTED cancel rider":      dispatch.RideCancelled,
		"ACCEPTED cancel rider":       dispatch.RideCancelled,
		"ACCEPTED cancel driver":      dispatch.RideRequested,
		"REQUESTED cancel system":     dispatch.RideCancelled,
		"ACCEPTED cancel system":      dispatch.RideCancelled,
		"IN_PROGRESS cancel system":   dispatch.RideCancelled,
	}
	for _, from := range statuses {
		for _, action := range actions {
			for _, actor := range actors {
				name := fmt.Sprintf("%s %s %s", from, action, actor)
				t.Run(name, func(t *testing.T) {
					got, err := dispatch.Transition(from, action, actor)
					want, ok := legal[name]
					if ok {
						if err != nil || got != want {
							t.Errorf("Transition = %q, %v; want %q, nil", got, err, want)
						}
						return
					}
					var e *dispatch.Error
					if !errors.As(err, &e) {
						t.Fatalf("Transition = %q, %v; want an illegal_transition error", got, err)
					}
					if e.Code != dispatch.CodeConflict || e.Reason != dispatch.ReasonIllegalTransition {
						t.Errorf("error = %s/%s, want conflict/illegal_transition", e.Code, e.Reason)
					}
					if got, want := e.Details["current_status"], string(from); got != want {
						t.Errorf("details.current_status = %v, want %v", got, want)
					}
				})
			}
		}
	}
}

func TestValidatePointEdges(t *testing.T) {
	t.Parallel()
	next := func(x, toward float64) float64 { return math.Nextafter(x, toward) }
	tests := []struct {
		name      string
		p         dispatch.Point
		wantField string // "" means valid
		wantRule  string
	}{
		{"origin", dispatch.Point{}, "", ""},
		{"north GEO limit", dispatch.Point{Lat: dispatch.MaxGeoLat, Lng: 0}, "", ""},
		{"south GEO limit", dispatch.Point{Lat: -dispatch.MaxGeoLat, Lng: 0}, "", ""},
		{"east edge", dispatch.Point{Lat: 0, Lng: 180}, "", ""},
		{"west edge", dispatch.Point{Lat: 0, Lng: -180}, "", ""},
		{"just past the north GEO limit", dispatch.Point{Lat: next(dispatch.MaxGeoLat, 90), Lng: 0}, "p.lat", "85.05112878"},
		{"just past the south GEO limit", dispatch.Point{Lat: next(-dispatch.MaxGeoLat, -90), Lng: 0}, "p.lat", "85.05112878"},
		{"north pole", dispatch.Point{Lat: 90, Lng: 0}, "p.lat", "85.05112878"},
		{"past 90", dispatch.Point{Lat: next(90, 91), Lng: 0}, "p.lat", "between -90 and 90"},
		{"past -180", dispatch.Point{Lat: 0, Lng: next(-180, -181)}, "p.lng", "between -180 and 180"},
		{"past 180", dispatch.Point{Lat: 0, Lng: 180.5}, "p.lng", "between -180 and 180"},
		{"NaN lat", dispatch.Point{Lat: math.NaN(), Lng: 0}, "p.lat", "finite"},
		{"infinite lng", dispatch.Point{Lat: 0, Lng: math.Inf(-1)}, "p.lng", "finite"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := dispatch.ValidatePoint("p", tc.p)
			if tc.wantField == "" {
				if err != nil {
					t.Errorf("ValidatePoint(%v) = %v, want nil", tc.p, err)
				}
				return
			}
			var e *dispatch.Error
			if !errors.As(err, &e) {
				t.Fatalf("ValidatePoint(%v) = %v, want an invalid_argument error", tc.p, err)
			}
			if got, want := e.Code, dispatch.CodeInvalidArgument; got != want {
				t.Errorf("code = %q, want %q", got, want)
			}
			if got, want := e.Field, tc.wantField; got != want {
				t.Errorf("field = %q, want %q", got, want)
			}
			if !strings.HasPrefix(e.Message, tc.wantField+": ") || !strings.Contains(e.Message, tc.wantRule) {
				t.Errorf("message %q should name %q and the rule %q", e.Message, tc.wantField, tc.wantRule)
			}
		})
	}
	t.Run("no prefix", func(t *testing.T) {
		var e *dispatch.Error
		if err := dispatch.ValidatePoint("", dispatch.Point{Lat: 91}); !errors.As(err, &e) || e.Field != "lat" {
			t.Errorf("field = %v, want lat", err)
		}
	})
}

func TestValidateRidePoint(t *testing.T) {
	t.Parallel()
	nyc := dispatch.Area{MinLat: 40.40, MinLng: -74.40, MaxLat: 41.10, MaxLng: -73.50}
	tests := []struct {
		name      string
		p         dispatch.Point
		wantField string
	}{
		{"midtown", dispatch.Point{Lat: 40.75, Lng: -73.98}, ""},
		{"area corner", dispatch.Point{Lat: 40.40, Lng: -74.40}, ""},
		{"zero lat", dispatch.Point{Lat: 0, Lng: -73.98}, "pickup"},
		{"zero both", dispatch.Point{}, "pickup"},
		{"just north of the area", dispatch.Point{Lat: 41.116669, Lng: -73.98}, "pickup"},
		{"London", dispatch.Point{Lat: 51.5072, Lng: -0.1276}, "pickup"},
		{"out of range", dispatch.Point{Lat: 404.97812, Lng: 0}, "pickup.lat"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := dispatch.ValidateRidePoint("pickup", tc.p, nyc)
			var e *dispatch.Error
			switch {
			case tc.wantField == "" && err != nil:
				t.Errorf("err = %v, want nil", err)
			case tc.wantField != "" && !errors.As(err, &e):
				t.Errorf("err = %v, want an invalid_argument on %s", err, tc.wantField)
			case tc.wantField != "" && e.Field != tc.wantField:
				t.Errorf("field = %q, want %q", e.Field, tc.wantField)
			}
		})
	}
}

func TestEstimateFare(t *testing.T) {
	t.Parallel()
	p := dispatch.FareParams{BaseCents: 300, PerKmCents: 175, PerMinCents: 50, MinimumCents: 800, RoadFactor: 1.3, AvgSpeedMPS: 7}
	a := dispatch.Point{Lat: 40.7549, Lng: -73.9840}

	t.Run("follows the formula", func(t *testing.T) {
		b := dispatch.Point{Lat: 40.7306, Lng: -73.9866}
		d := dispatch.DistanceM(a, b) * 1.3
		dur := d / 7
		want := int64(math.Round(300 + 175*d/1000 + 50*dur/60))
		got := dispatch.EstimateFare(p, a, b)
		if got.FareCents != want {
			t.Errorf("FareCents = %d, want %d", got.FareCents, want)
		}
		if math.Abs(got.DistanceM-d) > 0.05 || math.Abs(got.DurationS-dur) > 0.5 {
			t.Errorf("distance, duration = %v, %v, want %v, %v", got.DistanceM, got.DurationS, d, dur)
		}
	})

	t.Run("a known trip", func(t *testing.T) {
		// 10 km of road at 7 m/s: 300 + 1750 + 50 × 1428.57/60 = 3240.48 → 3240 cents.
		b := dispatch.Point{Lat: a.Lat + 10000/1.3/dispatch.EarthRadiusM*180/math.Pi, Lng: a.Lng}
		got := dispatch.EstimateFare(p, a, b)
		if got.FareCents != 3240 || got.DistanceM != 10000 || got.DurationS != 1429 {
			t.Errorf("estimate = %+v, want 3240 cents, 10000 m, 1429 s", got)
		}
	})

	t.Run("never below the minimum", func(t *testing.T) {
		if got, want := dispatch.EstimateFare(p, a, a).FareCents, int64(800); got != want {
			t.Errorf("FareCents = %d, want %d", got, want)
		}
	})

	t.Run("zero average speed gives zero duration", func(t *testing.T) {
		q := p
		q.AvgSpeedMPS = 0
		if got := dispatch.EstimateFare(q, a, dispatch.Point{Lat: 40.8, Lng: -73.9}); got.DurationS != 0 || math.IsNaN(float64(got.FareCents)) {
			t.Errorf("estimate = %+v, want zero duration", got)
		}
	})
}

func TestDistanceM(t *testing.T) {
	t.Parallel()
	// One degree of latitude on the Redis sphere.
	got := dispatch.DistanceM(dispatch.Point{Lat: 40, Lng: -74}, dispatch.Point{Lat: 41, Lng: -74})
	if want := dispatch.EarthRadiusM * math.Pi / 180; math.Abs(got-want) > 1e-6 {
		t.Errorf("DistanceM = %v, want %v", got, want)
	}
	if got := dispatch.DistanceM(dispatch.Point{Lat: 1, Lng: 2}, dispatch.Point{Lat: 1, Lng: 2}); got != 0 {
		t.Errorf("DistanceM of a point to itself = %v, want 0", got)
	}
}

func TestRank(t *testing.T) {
	t.Parallel()
	p := dispatch.ScoreParams{IdleBonusMPerMin: 50, IdleCapMin: 20, RatingBonusM: 300, DefaultRating: 4.7}
	ids := func(cs []dispatch.Candidate) string {
		var out []string
		for _, c := range cs {
			out = append(out, c.DriverID)
		}
		return strings.Join(out, ",")
	}

	t.Run("distance dominates", func(t *testing.T) {
		cs := []dispatch.Candidate{{DriverID: "c", DistanceM: 900}, {DriverID: "a", DistanceM: 100}, {DriverID: "b", DistanceM: 400}}
		dispatch.Rank(p, cs)
		if got, want := ids(cs), "a,b,c"; got != want {
			t.Errorf("order = %s, want %s", got, want)
		}
		if got, want := cs[0].Score, 100.0; got != want {
			t.Errorf("score = %v, want %v", got, want)
		}
	})

	t.Run("idle time and rating shift the score with caps", func(t *testing.T) {
		cs := []dispatch.Candidate{
			{DriverID: "idle-forever", DistanceM: 1500, IdleS: 10 * 3600}, // capped at 20 min: 1500 - 1000 = 500
			{DriverID: "fresh", DistanceM: 600},                           // 600
			{DriverID: "five-star", DistanceM: 640, Rating: 5},            // 640 - 90 = 550
		}
		dispatch.Rank(p, cs)
		if got, want := ids(cs), "idle-forever,five-star,fresh"; got != want {
			t.Errorf("order = %s, want %s", got, want)
		}
		if got, want := cs[0].Score, 500.0; math.Abs(got-want) > 1e-9 {
			t.Errorf("capped idle score = %v, want %v", got, want)
		}
	})

	t.Run("ties are broken by distance then driver id, whatever the input order", func(t *testing.T) {
		base := []dispatch.Candidate{
			{DriverID: "d-b", DistanceM: 300},
			{DriverID: "d-a", DistanceM: 300},
			{DriverID: "d-near-idle", DistanceM: 250, IdleS: 60}, // 250 - 50 = 200
			{DriverID: "d-far-idle", DistanceM: 350, IdleS: 180}, // 350 - 150 = 200
			{DriverID: "d-c", DistanceM: 300},
		}
		want := "d-near-idle,d-far-idle,d-a,d-b,d-c"
		for shift := range base {
			cs := append(append([]dispatch.Candidate(nil), base[shift:]...), base[:shift]...)
			for i, j := 0, len(cs)-1; shift%2 == 1 && i < j; i, j = i+1, j-1 {
				cs[i], cs[j] = cs[j], cs[i]
			}
			dispatch.Rank(p, cs)
			if got := ids(cs); got != want {
				t.Errorf("input rotation %d: order = %s, want %s", shift, got, want)
			}
		}
	})
}

func TestErrorHelpers(t *testing.T) {
	t.Parallel()
	wrapped := fmt.Errorf("context: %w", dispatch.Conflict(dispatch.ReasonRideTaken, "taken"))
	if got, want := dispatch.ErrorCode(wrapped), dispatch.CodeConflict; got != want {
		t.Errorf("ErrorCode(wrapped conflict) = %q, want %q", got, want)
	}
	if got, want := dispatch.ErrorCode(errors.New("boom")), dispatch.CodeInternal; got != want {
		t.Errorf("ErrorCode(plain) = %q, want %q", got, want)
	}
	if got, want := dispatch.AsError(wrapped).Reason, dispatch.ReasonRideTaken; got != want {
		t.Errorf("AsError reason = %q, want %q", got, want)
	}
	if got, want := dispatch.Invalid("pickup.lat", "must be x").Message, "pickup.lat: must be x"; got != want {
		t.Errorf("Invalid message = %q, want %q", got, want)
	}
}
