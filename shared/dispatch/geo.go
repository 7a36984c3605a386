package dispatch

import (
	"fmt"
	"math"
	"strconv"
)

// MaxGeoLat is the largest |latitude| in degrees Redis GEO can index (EPSG:900913 / Web Mercator
// limit). Positions beyond it cannot be stored in the available-drivers GEO set, so flagdown rejects them.
const MaxGeoLat = 85.05112878

// EarthRadiusM is the Earth radius in metres of flagdown's haversine distances: Redis GEO's own value,
// so a distance computed here agrees with GEOSEARCH's. It is about 0.03 % above the mean Earth radius
// (6371008.8 m), which does not matter for dispatch.
const EarthRadiusM = 6372797.560856

// Point is a WGS84 position in degrees, latitude first.
type Point struct {
	// Lat is the latitude in degrees.
	Lat float64 `json:"lat"`
	// Lng is the longitude in degrees.
	Lng float64 `json:"lng"`
}

// String formats p as "lat,lng".
func (p Point) String() string {
	return strconv.FormatFloat(p.Lat, 'f', 6, 64) + "," + strconv.FormatFloat(p.Lng, 'f', 6, 64)
}

// ValidatePoint checks that p is a finite WGS84 position Redis GEO can index: |lat| <= MaxGeoLat,
// |lng| <= 180. field prefixes the error's field name ("pickup" gives "pickup.lat").
func ValidatePoint(field string, p Point) error {
	name := func(s string) string {
		if field == "" {
			return s
		}
		return field + "." + s
	}
	if math.IsNaN(p.Lat) || math.IsInf(p.Lat, 0) {
		return Invalid(name("lat"), "must be a finite number")
	}
	if math.IsNaN(p.Lng) || math.IsInf(p.Lng, 0) {
		return Invalid(name("lng"), "must be a finite number")
	}
	if p.Lat < -90 || p.Lat > 90 {
		return Invalid(name("lat"), "must be between -90 and 90 degrees")
	}
	if p.Lng < -180 || p.Lng > 180 {
		return Invalid(name("lng"), "must be between -180 and 180 degrees")
	}
	if math.Abs(p.Lat) > MaxGeoLat {
		return Invalid(name("lat"), fmt.Sprintf("must be between -%v and %v degrees (the range Redis GEO can index)", MaxGeoLat, MaxGeoLat))
	}
	return nil
}

// Area is a latitude/longitude box in WGS84 degrees, the service area rides must start and end in.
type Area struct {
	MinLat, MinLng, MaxLat, MaxLng float64
}

// Contains reports whether p lies inside the box (edges included).
func (a Area) Contains(p Point) bool {
	return p.Lat >= a.MinLat && p.Lat <= a.MaxLat && p.Lng >= a.MinLng && p.Lng <= a.MaxLng
}

// ValidateRidePoint checks a pickup or dropoff: a valid point (ValidatePoint), not the (0, 0) or
// zero-coordinate GPS fault found in raw taxi data, and inside the service area.
func ValidateRidePoint(field string, p Point, area Area) error {
	if err := ValidatePoint(field, p); err != nil {
		return err
	}
	if p.Lat == 0 || p.Lng == 0 {
		return Invalid(field, "coordinates must not be 0 (a zero latitude or longitude is a GPS fault)")
	}
	if !area.Contains(p) {
		return Invalid(field, fmt.Sprintf("must be inside the service area lat %v..%v, lng %v..%v",
			area.MinLat, area.MaxLat, area.MinLng, area.MaxLng))
	}
	return nil
}

// DistanceM is the great-circle (haversine) distance between a and b in metres.
func DistanceM(a, b Point) float64 {
	const rad = math.Pi / 180
	dLat := (b.Lat - a.Lat) * rad
	dLng := (b.Lng - a.Lng) * rad
	s := math.Sin(dLat/2)*math.Sin(dLat/2) + math.Cos(a.Lat*rad)*math.Cos(b.Lat*rad)*math.Sin(dLng/2)*math.Sin(dLng/2)
	return 2 * EarthRadiusM * math.Asin(math.Min(1, math.Sqrt(s)))
}
