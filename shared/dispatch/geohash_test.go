package dispatch_test

import (
	"math"
	"testing"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Known vectors: the examples of geohash.org and of Wikipedia's Geohash article.
func TestGeohashKnownVectors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    dispatch.Point
		prec int
		want string
	}{
		{dispatch.Point{Lat: 57.64911, Lng: 10.40744}, 11, "u4pruydqqvj"}, // Wikipedia (Jutland)
		{dispatch.Point{Lat: 42.6, Lng: -5.6}, 5, "ezs42"},                // Wikipedia's decoding example
		{dispatch.Point{Lat: 40.7580, Lng: -73.9855}, 6, "dr5ru7"},        // Times Square
		{dispatch.Point{Lat: 0, Lng: 0}, 4, "s000"},
		{dispatch.Point{Lat: -90, Lng: -180}, 3, "000"},
		{dispatch.Point{Lat: 90, Lng: 180}, 3, "zzz"},
	}
	for _, tt := range tests {
		if got := dispatch.Geohash(tt.p, tt.prec); got != tt.want {
			t.Errorf("Geohash(%v, %d) = %q, want %q", tt.p, tt.prec, got, tt.want)
		}
	}
}

func TestGeohashBoxContainsPoint(t *testing.T) {
	t.Parallel()
	for _, p := range []dispatch.Point{{Lat: 40.7580, Lng: -73.9855}, {Lat: 57.64911, Lng: 10.40744}, {Lat: -33.8688, Lng: 151.2093}} {
		h := dispatch.Geohash(p, dispatch.SurgeCellPrecision)
		box, ok := dispatch.GeohashBox(h)
		if !ok || !box.Contains(p) {
			t.Fatalf("GeohashBox(%q) = %+v, %v: does not contain %v", h, box, ok, p)
		}
		if dispatch.Geohash(box.Center(), dispatch.SurgeCellPrecision) != h {
			t.Errorf("centre of %q encodes to another cell", h)
		}
		// Precision 6: 0.0109863° × 0.0054932°.
		if w, ht := box.MaxLng-box.MinLng, box.MaxLat-box.MinLat; math.Abs(w-360.0/32768) > 1e-12 || math.Abs(ht-180.0/32768) > 1e-12 {
			t.Errorf("cell %q is %v° × %v°", h, w, ht)
		}
	}
	// Wikipedia: "ezs42" decodes to 42.605, -5.603 (the centre of its box).
	box, _ := dispatch.GeohashBox("EZS42")
	if c := box.Center(); math.Abs(c.Lat-42.605) > 0.001 || math.Abs(c.Lng-(-5.603)) > 0.001 {
		t.Errorf("centre of ezs42 = %v", c)
	}
	for _, bad := range []string{"", "dr5ra", "dr5ru7!", "0123456789bcd"} {
		if _, ok := dispatch.GeohashBox(bad); ok {
			t.Errorf("GeohashBox(%q) accepted", bad)
		}
	}
	// At New York's latitude a cell is about 0.93 km × 0.61 km.
	box, _ = dispatch.GeohashBox("dr5ru7")
	h, w := box.SizeM()
	if math.Abs(h-611) > 5 || math.Abs(w-926) > 10 {
		t.Errorf("dr5ru7 is %.0f m × %.0f m", h, w)
	}
}
