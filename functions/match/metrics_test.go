package function_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/flagdown/flagdown/shared/metrics"
)

// outcomeCounts returns flagdown_match_outcomes_total by outcome label.
func outcomeCounts(t *testing.T) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	metrics.MatchOutcomes.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		out[d.GetLabel()[0].GetValue()] = d.GetCounter().GetValue()
	}
	return out
}

// TestBatchRunCountsRidesNotReports: a batch window run counts its two offered rides under
// "offered", and its report (text holding counts) never becomes a label value.
func TestBatchRunCountsRidesNotReports(t *testing.T) {
	env := batchEnv(t, nil)
	a, b := twoByTwo(t, env)
	env.MatchRide(t, a)
	env.MatchRide(t, b)
	due := closeWindow(t, env)
	before := outcomeCounts(t)
	env.MatchEvent(t, due)
	after := outcomeCounts(t)
	if got := after["offered"] - before["offered"]; got != 2 {
		t.Errorf("offered +%v after a window offering 2 rides, want +2", got)
	}
	for o := range after {
		if strings.Contains(o, " ") || strings.Contains(o, ":") {
			t.Errorf("outcome label %q is not a word", o)
		}
	}
}
