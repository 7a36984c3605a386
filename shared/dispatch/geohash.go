package dispatch

import (
	"math"
	"strings"
)

// SurgeCellPrecision is the geohash length of a surge cell: 6 characters, a cell of 0.0109863° of
// longitude × 0.0054932° of latitude, about 1.22 km × 0.61 km at the equator and 0.93 km × 0.61 km
// at New York's 40.7° N. Chosen so that a cell is a few minutes' drive across (a driver in the cell
// can reach any pickup in it at about the same cost, the premise of a per-cell supply/demand ratio)
// while holding enough drivers and requests for a ratio to mean something: length 5 (4.9 km × 4.9 km
// at the equator, 3.7 km wide in New York) spans neighbourhoods with different demand (Midtown and
// the Upper East Side), length 7 (153 m × 153 m) holds one or two drivers at most.
const SurgeCellPrecision = 6

// geohashAlphabet is the geohash base-32 alphabet (no a, i, l, o).
const geohashAlphabet = "0123456789bcdefghjkmnpqrstuvwxyz"

// Geohash encodes p (WGS84 degrees, lat before lng) as a geohash of precision characters (1..12),
// the standard interleaving of longitude and latitude bisection bits (longitude first), 5 bits a
// character. Latitudes outside -90..90 and longitudes outside -180..180 are clamped.
func Geohash(p Point, precision int) string {
	precision = min(max(precision, 1), 12)
	lat := math.Max(-90, math.Min(90, p.Lat))
	lng := math.Max(-180, math.Min(180, p.Lng))
	latLo, latHi, lngLo, lngHi := -90.0, 90.0, -180.0, 180.0
	var b strings.Builder
	b.Grow(precision)
	even := true // longitude bit
	ch, bit := 0, 0
	for b.Len() < precision {
		if even {
			mid := (lngLo + lngHi) / 2
			if lng >= mid {
				ch = ch<<1 | 1
				lngLo = mid
			} else {
				ch <<= 1
				lngHi = mid
			}
		} else {
			mid := (latLo + latHi) / 2
			if lat >= mid {
				ch = ch<<1 | 1
				latLo = mid
			} else {
				ch <<= 1
				latHi = mid
			}
		}
		even = !even
		if bit++; bit == 5 {
			b.WriteByte(geohashAlphabet[ch])
			ch, bit = 0, 0
		}
	}
	return b.String()
}

// GeohashBox is the latitude/longitude box (WGS84 degrees) of geohash cell h, and false when h is
// empty or has a character outside the geohash alphabet (upper case is accepted).
func GeohashBox(h string) (Area, bool) {
	if h == "" || len(h) > 12 {
		return Area{}, false
	}
	a := Area{MinLat: -90, MaxLat: 90, MinLng: -180, MaxLng: 180}
	even := true
	for i := 0; i < len(h); i++ {
		v := strings.IndexByte(geohashAlphabet, lower(h[i]))
		if v < 0 {
			return Area{}, false
		}
		for k := 4; k >= 0; k-- {
			on := v>>k&1 == 1
			if even {
				mid := (a.MinLng + a.MaxLng) / 2
				if on {
					a.MinLng = mid
				} else {
					a.MaxLng = mid
				}
			} else {
				mid := (a.MinLat + a.MaxLat) / 2
				if on {
					a.MinLat = mid
				} else {
					a.MaxLat = mid
				}
			}
			even = !even
		}
	}
	return a, true
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Center is the middle of the box.
func (a Area) Center() Point {
	return Point{Lat: (a.MinLat + a.MaxLat) / 2, Lng: (a.MinLng + a.MaxLng) / 2}
}

// SizeM is the box's height (along the meridian) and width (along the parallel of its centre) in
// metres, for a GEOSEARCH BYBOX of it.
func (a Area) SizeM() (heightM, widthM float64) {
	const mPerDeg = EarthRadiusM * math.Pi / 180
	c := a.Center()
	return (a.MaxLat - a.MinLat) * mPerDeg, (a.MaxLng - a.MinLng) * mPerDeg * math.Cos(c.Lat*math.Pi/180)
}
