package lifecycle_test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// TestStartTeachesTheDrivePace: a ride's start folds its driver's drive (accept → start, against
// his distance when offered) into the drive pace the wait estimate reads; the complete does not.
func TestStartTeachesTheDrivePace(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 300, 0))
	rideID := offered(t, env, "r-1", "d-1")
	accepted := time.Now()
	if status, body := env.AcceptRide(t, rideID, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	time.Sleep(300 * time.Millisecond)
	pace := func() dispatch.DrivePace {
		t.Helper()
		rd, err := env.D.Redis.ReadSurge(t.Context(), false, "", dispatch.Area{}, time.Minute, 10, pickup, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return rd.DrivePace
	}
	if p := pace(); p.N != 0 {
		t.Fatalf("before the start: %+v, want no pickup", p)
	}
	for _, action := range []string{"start", "complete"} {
		if status, body := env.RideAction(t, rideID, action, fntest.JSON{"driver_id": "d-1"}); status != http.StatusOK {
			t.Fatalf("%s: %d %v", action, status, body)
		}
	}
	upper := time.Since(accepted).Seconds() // FLAGDOWN_SIM_SPEEDUP is 1
	p := pace()
	if p.N != 1 || math.Abs(p.DistM-300) > 5 || p.DriveS < 0.3 || p.DriveS > upper {
		t.Errorf("after one pickup: %+v, want 1 sample, about 300 m, 0.3..%.1f s", p, upper)
	}
}

// TestStartFoldsTheWaitResidual: a quoted ride's start folds into the wait calibration its request
// → start time less the quote without its calibration part (the first sample is the calibration).
func TestStartFoldsTheWaitResidual(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 800, 0))
	rideID := offered(t, env, "r-1", "d-1")
	if status, body := env.AcceptRide(t, rideID, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	if status, body := env.RideAction(t, rideID, "start", fntest.JSON{"driver_id": "d-1"}); status != http.StatusOK {
		t.Fatalf("start: %d %v", status, body)
	}
	ride, err := pgstore.GetRide(t.Context(), env.D.DB.Pool, rideID, false)
	if err != nil {
		t.Fatal(err)
	}
	if ride.QuotedWaitS == nil || ride.QuotedWaitCalS == nil || *ride.QuotedWaitS <= 0 || ride.StartedAt == nil {
		t.Fatalf("ride quoted %v (calibration part %v), started %v; want a quote and a start", ride.QuotedWaitS, ride.QuotedWaitCalS, ride.StartedAt)
	}
	want := ride.StartedAt.Sub(ride.CreatedAt).Seconds() - (*ride.QuotedWaitS - *ride.QuotedWaitCalS)
	rd, err := env.D.Redis.ReadSurge(t.Context(), false, "", dispatch.Area{}, time.Minute, 10, pickup, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(rd.WaitCalibrationS-want) > 0.01 {
		t.Errorf("calibration %.3f s after one pickup, want its residual %.3f s", rd.WaitCalibrationS, want)
	}
}
