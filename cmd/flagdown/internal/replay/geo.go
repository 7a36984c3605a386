package replay

import (
	"math"
	"time"
)

// EarthRadiusM is the mean Earth radius in metres used by Haversine (IUGG mean radius).
const EarthRadiusM = 6371008.8

// LatLng is a WGS84 position in decimal degrees, latitude first (lat, lng order everywhere in this
// package and on the wire).
type LatLng struct {
	// Lat is the latitude in WGS84 degrees, -90..90.
	Lat float64 `json:"lat"`
	// Lng is the longitude in WGS84 degrees, -180..180.
	Lng float64 `json:"lng"`
}

func rad(deg float64) float64 { return deg * math.Pi / 180 }
func deg(r float64) float64   { return r * 180 / math.Pi }

// Haversine returns the great-circle distance between a and b in metres.
func Haversine(a, b LatLng) float64 {
	dLat := rad(b.Lat - a.Lat)
	dLng := rad(b.Lng - a.Lng)
	s := math.Sin(dLat/2)*math.Sin(dLat/2) +
		math.Cos(rad(a.Lat))*math.Cos(rad(b.Lat))*math.Sin(dLng/2)*math.Sin(dLng/2)
	return 2 * EarthRadiusM * math.Asin(math.Min(1, math.Sqrt(s)))
}

// Bearing returns the initial great-circle heading from a to b in degrees clockwise from north, 0..360.
func Bearing(a, b LatLng) float64 {
	φ1, φ2 := rad(a.Lat), rad(b.Lat)
	dλ := rad(b.Lng - a.Lng)
	y := math.Sin(dλ) * math.Cos(φ2)
	x := math.Cos(φ1)*math.Sin(φ2) - math.Sin(φ1)*math.Cos(φ2)*math.Cos(dλ)
	h := math.Mod(deg(math.Atan2(y, x))+360, 360)
	if h >= 360 {
		h = 0
	}
	return h
}

// Interpolate returns the point a fraction f (0..1, clamped) of the way from a to b along the great
// circle, so Haversine(a, Interpolate(a, b, f)) = f × Haversine(a, b). Result is lat, lng in WGS84 degrees.
func Interpolate(a, b LatLng, f float64) LatLng {
	if f <= 0 {
		return a
	}
	if f >= 1 {
		return b
	}
	d := Haversine(a, b) / EarthRadiusM // angular distance, radians
	if d < 1e-12 {
		return a
	}
	φ1, λ1, φ2, λ2 := rad(a.Lat), rad(a.Lng), rad(b.Lat), rad(b.Lng)
	A := math.Sin((1-f)*d) / math.Sin(d)
	B := math.Sin(f*d) / math.Sin(d)
	x := A*math.Cos(φ1)*math.Cos(λ1) + B*math.Cos(φ2)*math.Cos(λ2)
	y := A*math.Cos(φ1)*math.Sin(λ1) + B*math.Cos(φ2)*math.Sin(λ2)
	z := A*math.Sin(φ1) + B*math.Sin(φ2)
	return LatLng{Lat: deg(math.Atan2(z, math.Hypot(x, y))), Lng: deg(math.Atan2(y, x))}
}

// Leg is a straight-line (great-circle) drive from From to To at a constant SpeedMPS, starting at
// simulated time Start (offset from the replay's simulated origin).
type Leg struct {
	// From is where the drive starts (WGS84 degrees, lat/lng).
	From LatLng
	// To is where the drive ends (WGS84 degrees, lat/lng).
	To LatLng
	// Start is the simulated time the drive starts, as an offset from the simulation origin.
	Start time.Duration
	// SpeedMPS is the driving speed in metres per simulated second; must be > 0.
	SpeedMPS float64
}

// LengthM is the leg's straight-line length in metres.
func (l Leg) LengthM() float64 { return Haversine(l.From, l.To) }

// Duration is the simulated time the leg takes: LengthM / SpeedMPS.
func (l Leg) Duration() time.Duration {
	if l.SpeedMPS <= 0 {
		return 0
	}
	return time.Duration(l.LengthM() / l.SpeedMPS * float64(time.Second))
}

// End is the simulated time (offset from the origin) the driver arrives at To.
func (l Leg) End() time.Duration { return l.Start + l.Duration() }

// At returns the driver's position at simulated time t (offset from the origin): From before Start,
// To after End, and in between the point SpeedMPS × (t − Start) metres along the great circle.
func (l Leg) At(t time.Duration) LatLng {
	total := l.LengthM()
	if total <= 0 || l.SpeedMPS <= 0 {
		return l.To
	}
	covered := l.SpeedMPS * (t - l.Start).Seconds()
	return Interpolate(l.From, l.To, covered/total)
}

// Heading is the leg's initial bearing in degrees clockwise from north (0..360).
func (l Leg) Heading() float64 { return Bearing(l.From, l.To) }
