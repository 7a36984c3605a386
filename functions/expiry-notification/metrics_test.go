package function_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/metrics"
)

// lateness returns the count and sum of flagdown_timer_lateness_seconds for kind.
func lateness(t *testing.T, kind string) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := metrics.TimerLateness.WithLabelValues(kind).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// TestTimerLatenessObserved: a timer handled 3 s after the deadline its event carries is observed
// once, about 3 s late, under its kind.
func TestTimerLatenessObserved(t *testing.T) {
	env := fntest.NewTimeoutEnv(t, nil)
	rideID := env.CreateRide(t, "r-1", pickup, dropoff)
	if got, want := env.MatchRide(t, rideID), "no_driver"; got != want {
		t.Fatalf("match outcome = %q, want %q", got, want)
	}
	count, sum := lateness(t, "retry")
	ev := env.ExpiredEvent("retry:" + rideID)
	data := ev.Data.(events.RedisKeyExpiredData)
	data.DeadlineMs = time.Now().Add(-3 * time.Second).UnixMilli()
	ev.Data = data
	if got, want := env.Expire(t, ev), "done"; got != want {
		t.Fatalf("outcome = %q, want %q", got, want)
	}
	count2, sum2 := lateness(t, "retry")
	if count2 != count+1 || sum2-sum < 3 || sum2-sum > 30 {
		t.Errorf("retry lateness: %d samples (+%d), +%.3f s; want one more, about 3 s", count2, count2-count, sum2-sum)
	}
}
