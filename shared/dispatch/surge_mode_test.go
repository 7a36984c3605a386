package dispatch_test

import (
	"math"
	"testing"

	"github.com/flagdown/flagdown/shared/dispatch"
)

func TestChargedShadowAndOffChargeOne(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode     dispatch.SurgeMode
		computed float64
		want     float64
	}{
		{dispatch.SurgeOn, 1.75, 1.75},
		{dispatch.SurgeOn, 1.23456, 1.23},
		{dispatch.SurgeOn, math.NaN(), 1},
		{dispatch.SurgeShadow, 2.5, 1},
		{dispatch.SurgeOff, 2.5, 1},
		{"", 2.5, 1},
	}
	for _, tt := range tests {
		if got := dispatch.Charged(tt.mode, tt.computed); got != tt.want {
			t.Errorf("Charged(%q, %v) = %v, want %v", tt.mode, tt.computed, got, tt.want)
		}
	}
	if _, err := dispatch.ParseSurgeMode("surge_mode", "max"); dispatch.AsError(err).Field != "surge_mode" {
		t.Errorf("ParseSurgeMode(max) = %v", err)
	}
	for _, m := range []string{"off", "shadow", "on"} {
		if got, err := dispatch.ParseSurgeMode("surge_mode", m); err != nil || string(got) != m {
			t.Errorf("ParseSurgeMode(%s) = %v, %v", m, got, err)
		}
	}
}

func TestCapSurgeAppliesCeilingAndEmergencyAtOnce(t *testing.T) {
	t.Parallel()
	p := surgeParams() // ceiling 3, emergency cap 1.5
	tests := []struct {
		name      string
		m         float64
		emergency bool
		want      float64
	}{
		{"WithinLimits", 2.25, false, 2.25},
		{"AboveCeiling", 4.5, false, 3},
		{"EmergencyCap", 2.25, true, 1.5},
		{"EmergencyBelowCap", 1.25, true, 1.25},
		{"MissingIsOne", math.NaN(), false, 1},
		{"BelowOneIsOne", 0.4, true, 1},
	}
	for _, tt := range tests {
		if got := dispatch.CapSurge(p, tt.m, tt.emergency); got != tt.want {
			t.Errorf("%s: CapSurge(%v, %v) = %v, want %v", tt.name, tt.m, tt.emergency, got, tt.want)
		}
	}
}

func TestSurgedFare(t *testing.T) {
	t.Parallel()
	e := dispatch.Estimate{FareCents: 1234, DistanceM: 2100, DurationS: 300}
	if got := dispatch.SurgedFare(e, 1.5); got.FareCents != 1851 || got.DistanceM != 2100 || got.DurationS != 300 {
		t.Errorf("SurgedFare(1234, 1.5) = %+v, want 1851 cents, distance and duration unchanged", got)
	}
	if got := dispatch.SurgedFare(e, 1); got.FareCents != 1234 {
		t.Errorf("SurgedFare(1234, 1) = %d", got.FareCents)
	}
	if got := dispatch.SurgedFare(e, 0.5); got.FareCents != 1234 {
		t.Errorf("a multiplier below 1.0 discounted the fare: %d", got.FareCents)
	}
}

func TestEstimateWait(t *testing.T) {
	t.Parallel()
	// 700 m × road factor 1.3 / 7 m/s = 130 s of drive, + 25 s of recent match delay.
	w, ok := dispatch.EstimateWait(25, 700, 1.3/7.0)
	if !ok || w.MatchS != 25 || w.DriveS != 130 || w.TotalS != 155 {
		t.Fatalf("EstimateWait(25, 700 m) = %+v, %v; want 25 + 130 = 155 s", w, ok)
	}
	if w, ok := dispatch.EstimateWait(-3, 0, 1.3/7.0); !ok || w.TotalS != 0 {
		t.Errorf("a driver at the pickup, no match delay: %+v, %v", w, ok)
	}
	if _, ok := dispatch.EstimateWait(25, -1, 1.3/7.0); ok {
		t.Error("no driver near gave an estimate")
	}
	if _, ok := dispatch.EstimateWait(25, 700, 0); ok {
		t.Error("a zero pace gave an estimate")
	}
}

func TestCapDrive(t *testing.T) {
	t.Parallel()
	w, _ := dispatch.EstimateWait(25, 700, 1.3/7.0) // 25 + 130 s
	if got := dispatch.CapDrive(w, 60); got.DriveS != 60 || got.TotalS != 85 || got.MatchS != 25 {
		t.Errorf("CapDrive(25 + 130 s, 60) = %+v, want 25 + 60 = 85 s", got)
	}
	for _, c := range []float64{0, -5, 200, math.Inf(1), math.NaN()} {
		if got := dispatch.CapDrive(w, c); got != w {
			t.Errorf("CapDrive(w, %v) = %+v, want w unchanged", c, got)
		}
	}
	if got := dispatch.Calibrate(dispatch.CapDrive(w, 60), -100); got.TotalS != 0 || got.CalibrationS != -85 {
		t.Errorf("a calibration below the capped parts: %+v, want 0 s with −85 s applied", got)
	}
	few := dispatch.DrivePace{DriveS: 60, DistM: 400, N: dispatch.DrivePaceMinSamples - 1}
	if few.WindowDriveS() != 0 {
		t.Errorf("WindowDriveS with %d pickups = %v, want 0 (no ceiling yet)", few.N, few.WindowDriveS())
	}
	if enough := (dispatch.DrivePace{DriveS: 60, DistM: 400, N: dispatch.DrivePaceMinSamples}); enough.WindowDriveS() != 60 {
		t.Errorf("WindowDriveS = %v, want the mean drive 60 s", enough.WindowDriveS())
	}
}
