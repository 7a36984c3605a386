package dispatch_test

import (
	"errors"
	"math"
	"testing"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// surgeParams are DefaultSurgeParams with an emergency cap of 1.5, so the cap differs from the floor.
func surgeParams() dispatch.SurgeParams {
	p := dispatch.DefaultSurgeParams()
	p.EmergencyCap = 1.5
	return p
}

func TestSurgeTarget(t *testing.T) {
	t.Parallel()
	p := surgeParams() // floor 1, ceiling 3, threshold 1, sensitivity 0.5, min demand 3
	tests := []struct {
		name string
		load dispatch.CellLoad
		want float64
	}{
		{"Quiet", dispatch.CellLoad{Supply: 10, Demand: 4}, 1},
		{"RatioAtThreshold", dispatch.CellLoad{Supply: 5, Demand: 5}, 1},
		{"RatioTwo", dispatch.CellLoad{Supply: 5, Demand: 10}, 1.5},
		{"RatioThree", dispatch.CellLoad{Supply: 4, Demand: 12}, 2},
		{"AboveCeiling", dispatch.CellLoad{Supply: 1, Demand: 50}, 3},
		{"NoDriversEnoughDemand", dispatch.CellLoad{Supply: 0, Demand: 3}, 3},
		{"NoDriversTooLittleDemand", dispatch.CellLoad{Supply: 0, Demand: 2}, 1},
		{"BelowMinDemand", dispatch.CellLoad{Supply: 1, Demand: 2}, 1},
		{"Empty", dispatch.CellLoad{}, 1},
		{"NegativeIsNoData", dispatch.CellLoad{Supply: -1, Demand: 9}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dispatch.SurgeTarget(p, tt.load); got != tt.want {
				t.Fatalf("SurgeTarget(%+v) = %v, want %v", tt.load, got, tt.want)
			}
		})
	}
	// A floor above 1.0 holds for computed targets.
	p.Floor = 1.2
	if got := dispatch.SurgeTarget(p, dispatch.CellLoad{Supply: 10, Demand: 4}); got != 1.2 {
		t.Errorf("floor 1.2: quiet cell %v", got)
	}
}

func TestSurgeMultiplier(t *testing.T) {
	t.Parallel()
	p := surgeParams()                              // max step 0.25, emergency cap 1.5
	hot := dispatch.CellLoad{Supply: 1, Demand: 50} // target 3
	quiet := dispatch.CellLoad{Supply: 10, Demand: 1}
	tests := []struct {
		name             string
		prev             float64
		load             dispatch.CellLoad
		known, emergency bool
		want             float64
	}{
		{"RisesByAtMostMaxStep", 1, hot, true, false, 1.25},
		{"FallsByAtMostMaxStep", 2.5, quiet, true, false, 2.25},
		{"ReachesTargetWithinStep", 1.4, dispatch.CellLoad{Supply: 5, Demand: 10}, true, false, 1.5},
		{"StaysAtCeiling", 3, hot, true, false, 3},
		{"AboveCeilingClampedAtOnce", 5, hot, true, false, 3},
		{"MissingDataIsOneAtOnce", 2.5, hot, false, false, 1},
		{"NegativeCountIsMissingData", 2.5, dispatch.CellLoad{Supply: 3, Demand: -1}, true, false, 1},
		{"EmergencyCapsAtOnce", 2.75, hot, true, true, 1.5},
		{"EmergencyBelowCapUnchanged", 1, hot, true, true, 1.25},
		{"PrevNaNCountsAsOne", math.NaN(), hot, true, false, 1.25},
		{"PrevInfCountsAsOne", math.Inf(1), hot, true, false, 1.25},
		{"PrevBelowOneCountsAsOne", 0.5, quiet, true, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dispatch.SurgeMultiplier(p, tt.prev, tt.load, tt.known, tt.emergency); got != tt.want {
				t.Fatalf("SurgeMultiplier(prev %v, %+v, known %v, emergency %v) = %v, want %v",
					tt.prev, tt.load, tt.known, tt.emergency, got, tt.want)
			}
		})
	}
}

func TestSurgeStepsToTarget(t *testing.T) {
	t.Parallel()
	// From 1.0 to a target of 3.0 in steps of 0.25: 8 updates, never more than one step at a time,
	// then back down the same way once demand is gone.
	p := surgeParams()
	m := 1.0
	for i := 1; i <= 8; i++ {
		next := dispatch.SurgeMultiplier(p, m, dispatch.CellLoad{Supply: 1, Demand: 50}, true, false)
		if math.Abs(next-m) > p.MaxStep+1e-12 || next < m {
			t.Fatalf("update %d: %v → %v", i, m, next)
		}
		m = next
	}
	if m != 3 {
		t.Fatalf("after 8 updates %v, want 3", m)
	}
	for i := 1; i <= 8; i++ {
		m = dispatch.SurgeMultiplier(p, m, dispatch.CellLoad{Supply: 10}, true, false)
	}
	if m != 1 {
		t.Fatalf("after 8 quiet updates %v, want 1", m)
	}
}

func TestSurgeCells(t *testing.T) {
	t.Parallel()
	p := surgeParams()
	prev := map[string]float64{"dr5ru": 2, "dr5rv": 1.75}
	loads := map[string]dispatch.CellLoad{
		"dr5ru": {Supply: 2, Demand: 40}, // target 3: +0.25
		"dr72h": {Supply: 0, Demand: 5},  // new cell: from 1.0, +0.25
	}
	got := dispatch.Surge(p, prev, loads, false)
	want := map[string]float64{"dr5ru": 2.25, "dr5rv": 1, "dr72h": 1.25} // dr5rv has no data now
	if len(got) != len(want) {
		t.Fatalf("Surge = %v, want %v", got, want)
	}
	for cell, w := range want {
		if got[cell] != w {
			t.Errorf("cell %s = %v, want %v", cell, got[cell], w)
		}
	}
	if got := dispatch.Surge(p, prev, loads, true); got["dr5ru"] != 1.5 || got["dr72h"] != 1.25 {
		t.Errorf("emergency: %v", got)
	}
	if got := dispatch.Surge(p, nil, nil, false); len(got) != 0 {
		t.Errorf("no cells: %v", got)
	}
}

func TestSurgeParamsValidate(t *testing.T) {
	t.Parallel()
	if err := dispatch.DefaultSurgeParams().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct {
		name  string
		edit  func(*dispatch.SurgeParams)
		field string
	}{
		{"FloorBelowOne", func(p *dispatch.SurgeParams) { p.Floor = 0.9 }, "surge.floor"},
		{"FloorNaN", func(p *dispatch.SurgeParams) { p.Floor = math.NaN() }, "surge.floor"},
		{"CeilingBelowFloor", func(p *dispatch.SurgeParams) { p.Floor, p.Ceiling = 1.5, 1.2 }, "surge.ceiling"},
		{"CeilingInf", func(p *dispatch.SurgeParams) { p.Ceiling = math.Inf(1) }, "surge.ceiling"},
		{"MaxStepZero", func(p *dispatch.SurgeParams) { p.MaxStep = 0 }, "surge.max_step"},
		{"ThresholdZero", func(p *dispatch.SurgeParams) { p.Threshold = 0 }, "surge.threshold"},
		{"SensitivityNegative", func(p *dispatch.SurgeParams) { p.Sensitivity = -1 }, "surge.sensitivity"},
		{"MinDemandNegative", func(p *dispatch.SurgeParams) { p.MinDemand = -1 }, "surge.min_demand"},
		{"EmergencyCapBelowOne", func(p *dispatch.SurgeParams) { p.EmergencyCap = 0 }, "surge.emergency_cap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := dispatch.DefaultSurgeParams()
			tt.edit(&p)
			err := p.Validate()
			var de *dispatch.Error
			if !errors.As(err, &de) || de.Code != dispatch.CodeInvalidArgument || de.Field != tt.field {
				t.Fatalf("Validate = %v, want invalid_argument on %s", err, tt.field)
			}
		})
	}
}
