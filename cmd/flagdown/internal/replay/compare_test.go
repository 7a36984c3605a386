package replay

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseModes(t *testing.T) {
	t.Parallel()
	got, err := ParseModes("greedy, batch,auto")
	if err != nil || strings.Join(got, ",") != "greedy,batch,auto" {
		t.Errorf("greedy,batch,auto: %v, %v", got, err)
	}
	for _, bad := range []string{"", "greedy,", "fast", "greedy,greedy"} {
		if _, err := ParseModes(bad); err == nil || !strings.Contains(err.Error(), "compare-modes") {
			t.Errorf("%q: %v, want an error naming compare-modes", bad, err)
		}
	}
}

func TestParseDecisions(t *testing.T) {
	t.Parallel()
	text := `# HELP flagdown_match_mode_decisions_total x
# TYPE flagdown_match_mode_decisions_total counter
flagdown_match_mode_decisions_total{mode="batch",reason="scarce"} 12
flagdown_match_mode_decisions_total{mode="greedy",reason="ample"} 30
flagdown_match_mode_decisions_total{mode="greedy",reason="lone"} 8
flagdown_other_total{mode="batch"} 99
`
	got, reasons, err := ParseDecisions(strings.NewReader(text))
	if err != nil || len(got) != 2 || got["batch"] != 12 || got["greedy"] != 38 {
		t.Errorf("%v, %v; want batch 12, greedy 38", got, err)
	}
	if len(reasons) != 3 || reasons["batch/scarce"] != 12 || reasons["greedy/ample"] != 30 || reasons["greedy/lone"] != 8 {
		t.Errorf("by reason %v; want batch/scarce 12, greedy/ample 30, greedy/lone 8", reasons)
	}
}

func TestComparisonTable(t *testing.T) {
	t.Parallel()
	c := &Comparison{Rows: []ModeRow{
		rowOf("greedy", &Summary{PickupDistanceMeanM: 1859.4, MatchRate: 0.697, RidesMatched: 697, RidesRequested: 1000,
			TimeToMatchP95S: 123, TimeToMatchP99S: 180, TimeToMatchMaxS: 240, PickupWaitP95S: 301, PickupWaitP99S: 402,
			WaitErrors: &WaitErrorReport{MAES: 14.2, MeanSignedS: -3.1, BaselineMAES: 30, MAERatio: 0.47}}),
		{Mode: "auto", PickupMeanM: 800, Decisions: map[string]float64{"greedy": 30, "batch": 10},
			DecisionReasons: map[string]float64{"greedy/ample": 30, "batch/scarce": 10}, Err: "invariants: 1 violation"},
	}}
	var b bytes.Buffer
	c.WriteTable(&b)
	out := b.String()
	for _, want := range []string{"1859 m", "69.7 % (697/1000)", "123 / 180 / 240 s", "301 / 402 s", "14.2 / -3.1 s", "30.0 s (0.47)",
		"greedy 75 %, batch 25 % (n=40)", "auto: invariants: 1 violation",
		"auto decisions by reason: batch/scarce 10, greedy/ample 30"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSupplyDropDrivers(t *testing.T) {
	t.Parallel()
	a, b := SupplyDropDrivers(2000, 800, 3), SupplyDropDrivers(2000, 800, 3)
	if len(a) != 1200 {
		t.Fatalf("%d dropped, want 1200", len(a))
	}
	seen := map[int]bool{}
	for i, v := range a {
		if v != b[i] || v < 0 || v >= 2000 || seen[v] {
			t.Fatalf("drop %d: %d (again %d), want a seeded set of distinct indexes", i, v, b[i])
		}
		seen[v] = true
	}
	if SupplyDropDrivers(10, 10, 1) != nil || SupplyDropDrivers(10, 0, 1) != nil {
		t.Error("no drop wanted when keep is 0 or all")
	}
	o := DefaultOptions()
	o.Drivers, o.DriversDropTo, o.DriversDropAt = 100, 100, 0.5
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "drivers-drop-to") {
		t.Errorf("drop to all drivers: %v", err)
	}
	o.DriversDropTo, o.DriversDropAt = 40, 1
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "drivers-drop-at") {
		t.Errorf("drop at 1: %v", err)
	}
}
