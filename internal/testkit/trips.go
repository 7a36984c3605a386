package testkit

import (
	"encoding/csv"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// RepoRoot returns the repository root: the nearest folder above the working directory (a test's
// package folder) that holds go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("testkit: getwd: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("testkit: stat go.mod: %v", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("testkit: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Trip is one real NYC taxi trip of testdata/trips.csv (WGS84 degrees).
type Trip struct {
	Pickup, Dropoff dispatch.Point
}

// Trips returns the rows of testdata/trips.csv in file order, skipping rows with a missing or zero
// coordinate.
func Trips(t testing.TB) []Trip {
	t.Helper()
	f, err := os.Open(filepath.Join(RepoRoot(t), "testdata", "trips.csv"))
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("testkit: read trips: %v", err)
	}
	var out []Trip
	for _, r := range rows[1:] {
		if len(r) < 5 {
			continue
		}
		var v [4]float64
		ok := true
		for i := range v {
			if v[i], err = strconv.ParseFloat(r[i+1], 64); err != nil || v[i] == 0 {
				ok = false
			}
		}
		if ok {
			out = append(out, Trip{dispatch.Point{Lat: v[0], Lng: v[1]}, dispatch.Point{Lat: v[2], Lng: v[3]}})
		}
	}
	if len(out) == 0 {
		t.Fatalf("testkit: no trips in testdata/trips.csv")
	}
	return out
}
