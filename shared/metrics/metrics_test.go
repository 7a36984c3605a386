package metrics_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flagdown/flagdown/shared/metrics"
)

// okFleet is a fleet read that succeeds.
func okFleet(context.Context) (metrics.Fleet, error) {
	return metrics.Fleet{AvailableDrivers: 3, OpenRides: 2, OutboxLag: time.Second}, nil
}

// touchAll gives every vector one child: a family with none gathers nothing, and the linter and
// the docs/operations.md check would not see it.
func touchAll() {
	metrics.HTTPRequests.WithLabelValues("lint", "200")
	metrics.HTTPDuration.WithLabelValues("lint", "200")
	metrics.MatchOutcomes.WithLabelValues("lint")
	metrics.MatchDuration.WithLabelValues("lint")
	metrics.MatchModeDecisions.WithLabelValues("lint", "lint")
	metrics.OfferResponses.WithLabelValues("lint")
	metrics.TimerLateness.WithLabelValues("lint")
	metrics.TriggerDeliveries.WithLabelValues("lint")
	metrics.TriggerRetries.WithLabelValues("lint")
	metrics.TriggerUnavailable.WithLabelValues("lint")
	metrics.TriggerReleased.WithLabelValues("lint")
	metrics.TriggerDeadLetters.WithLabelValues("lint")
	metrics.ReconcileRepairs.WithLabelValues("lint")
	metrics.RideTimeouts.WithLabelValues("lint")
	metrics.Pings.WithLabelValues("lint")
	metrics.HailPresses.WithLabelValues("lint", "lint")
	metrics.SurgeMultiplier.WithLabelValues("lint")
	metrics.PushMessages.WithLabelValues("lint")
	metrics.EventsRefused.WithLabelValues("lint", "lint")
}

// TestFamiliesLint: every family passes promlint (names, units, _total on counters, help texts).
func TestFamiliesLint(t *testing.T) {
	cs := append(metrics.Collectors(), metrics.NewFleetCollector(okFleet, time.Second))
	touchAll()
	seen := map[string]bool{}
	for _, c := range cs {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if !strings.HasPrefix(mf.GetName(), "flagdown_") {
				t.Errorf("%s: not under the flagdown_ namespace", mf.GetName())
			}
			seen[mf.GetName()] = true
		}
	}
	// Families (the table of docs/operations.md) is exactly what the collectors define.
	var got []string
	for n := range seen {
		got = append(got, n)
	}
	want := append([]string(nil), metrics.Families...)
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("collected families\n %v\nwant metrics.Families\n %v", got, want)
	}
}

// TestRegistryGathersEveryFamily: Registry (what /metrics serves) holds every family of Families
// but the fleet gauges, which a platform adds with its FleetCollector.
func TestRegistryGathersEveryFamily(t *testing.T) {
	metrics.OutboxPublished.Add(0)
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, n := range metrics.Families {
		fleet := n == "flagdown_available_drivers" || n == "flagdown_open_rides" || n == "flagdown_outbox_lag_seconds"
		if got[n] == fleet {
			t.Errorf("%s: registered on Registry = %v, want %v", n, got[n], !fleet)
		}
	}
	if !got["go_goroutines"] || !got["process_cpu_seconds_total"] && !got["process_start_time_seconds"] {
		t.Errorf("runtime collectors missing: %v", got)
	}
}

// TestFleetCollector: the gauges carry the read values and the city label; a failed read fails the
// scrape of those gauges instead of reporting zeros.
func TestFleetCollector(t *testing.T) {
	c := metrics.NewFleetCollector(func(context.Context) (metrics.Fleet, error) {
		return metrics.Fleet{AvailableDrivers: 7, OpenRides: 4, OutboxLag: 1500 * time.Millisecond}, nil
	}, time.Second)
	want := `
# HELP flagdown_available_drivers Drivers available for offers (the GEO set's size), by city.
# TYPE flagdown_available_drivers gauge
flagdown_available_drivers{city="default"} 7
# HELP flagdown_open_rides Rides REQUESTED, ACCEPTED or IN_PROGRESS, by city.
# TYPE flagdown_open_rides gauge
flagdown_open_rides{city="default"} 4
# HELP flagdown_outbox_lag_seconds Age of the oldest unpublished outbox row (0 when none waits).
# TYPE flagdown_outbox_lag_seconds gauge
flagdown_outbox_lag_seconds 1.5
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	bad := metrics.NewFleetCollector(func(context.Context) (metrics.Fleet, error) {
		return metrics.Fleet{}, errors.New("redis down")
	}, time.Second)
	reg := prometheus.NewRegistry()
	reg.MustRegister(bad)
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "redis down") {
		t.Errorf("gather with a failed read: %v, want the read's error", err)
	}
}
