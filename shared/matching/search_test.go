package matching

import (
	"slices"
	"testing"
)

func TestRadii(t *testing.T) {
	t.Parallel()
	base := []float64{500, 1000, 2000, 4000, 8000}
	tests := []struct {
		attempts int
		want     []float64
	}{
		{0, []float64{500, 1000, 2000, 4000, 8000}},
		{1, []float64{500, 1000, 2000, 4000, 8000}},
		{2, []float64{500, 1000, 2000, 4000, 8000, 16000}},
		{3, []float64{500, 1000, 2000, 4000, 8000, 16000}},
		{4, []float64{500, 1000, 2000, 4000, 8000, 16000, 32000}},
		{7, []float64{500, 1000, 2000, 4000, 8000, 16000, 32000}},
	}
	for _, tc := range tests {
		if got := Radii(base, tc.attempts); !slices.Equal(got, tc.want) {
			t.Errorf("Radii(attempts %d) = %v, want %v", tc.attempts, got, tc.want)
		}
	}
	if !slices.Equal(base, []float64{500, 1000, 2000, 4000, 8000}) {
		t.Errorf("Radii changed the configured radii: %v", base)
	}
	// Widening must not alias the configured slice: appending to the result leaves it alone.
	wide := Radii(base[:2], 4)
	if !slices.Equal(wide, []float64{500, 1000, 2000, 4000}) || base[2] != 2000 {
		t.Errorf("Radii(base[:2], 4) = %v, base %v", wide, base)
	}
	if got := Radii([]float64{750}, 2); !slices.Equal(got, []float64{750, 1500}) {
		t.Errorf("Radii([750], 2) = %v, want [750 1500]", got)
	}
}
