// Command backdropgen draws the ops map's offline backdrop (functions/ops-map/assets): a grey density
// image of where the trips of a trips CSV (testdata/trips.csv: pickup_time, pickup_lat, pickup_lng,
// dropoff_lat, dropoff_lng) were picked up and dropped off, so the city's streets, bridges and
// airports show without any map tiles, and a JSON file naming the image's bounds (WGS84 degrees) and
// size (pixels). The projection is equirectangular with longitude scaled by the cosine of the box's
// middle latitude, so a pixel is about as wide as it is tall (metres). Run by go generate in
// functions/ops-map; rows that do not parse or fall outside the box are skipped.
package main

import (
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"strconv"
)

// Bounds is the box the backdrop covers and its size in pixels.
type Bounds struct {
	South  float64 `json:"south"`
	West   float64 `json:"west"`
	North  float64 `json:"north"`
	East   float64 `json:"east"`
	Width  int     `json:"width"`
	Height int     `json:"height"`
}

func main() {
	trips := flag.String("trips", "testdata/trips.csv", "trips CSV to draw")
	out := flag.String("out", "backdrop.png", "PNG to write")
	meta := flag.String("meta", "backdrop.json", "bounds JSON to write")
	width := flag.Int("width", 720, "image width, pixels")
	flag.Parse()
	b := Bounds{South: 40.60, West: -74.06, North: 40.88, East: -73.74, Width: *width}
	midLat := (b.South + b.North) / 2 * math.Pi / 180
	b.Height = int(math.Round(float64(b.Width) * (b.North - b.South) / ((b.East - b.West) * math.Cos(midLat))))
	if err := run(*trips, *out, *meta, b); err != nil {
		fmt.Fprintln(os.Stderr, "backdropgen:", err)
		os.Exit(1)
	}
}

func run(tripsPath, outPath, metaPath string, b Bounds) error {
	f, err := os.Open(tripsPath)
	if err != nil {
		return err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	density := make([]float64, b.Width*b.Height)
	plot := func(lat, lng float64) {
		x := int((lng - b.West) / (b.East - b.West) * float64(b.Width))
		y := int((b.North - lat) / (b.North - b.South) * float64(b.Height))
		if x >= 0 && x < b.Width && y >= 0 && y < b.Height {
			density[y*b.Width+x]++
		}
	}
	points := 0
	for first := true; ; first = false {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil || first || len(rec) < 5 {
			continue
		}
		var v [4]float64
		ok := true
		for i := range v {
			if v[i], err = strconv.ParseFloat(rec[i+1], 64); err != nil {
				ok = false
			}
		}
		if ok {
			plot(v[0], v[1])
			plot(v[2], v[3])
			points += 2
		}
	}
	if points == 0 {
		return fmt.Errorf("%s: no trip points", tripsPath)
	}
	blurred := blur(density, b.Width, b.Height, 2)
	peak := 0.0
	for _, d := range blurred {
		peak = math.Max(peak, d)
	}
	img := image.NewGray(image.Rect(0, 0, b.Width, b.Height))
	for i, d := range blurred {
		// Log scale: a lone trip still shows, Midtown does not swamp the rest.
		v := math.Log1p(d*200) / math.Log1p(peak*200)
		img.Pix[i] = uint8(math.Round(230 * v)) // black where no trip: the page adds the image onto its background
	}
	o, err := os.Create(outPath)
	if err != nil {
		return err
	}
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(o, img); err != nil {
		o.Close()
		return err
	}
	if err := o.Close(); err != nil {
		return err
	}
	mb, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(metaPath, append(mb, '\n'), 0o644)
}

// blur applies a box blur of radius r (pixels) three times, close to a Gaussian.
func blur(src []float64, w, h, r int) []float64 {
	a := append([]float64(nil), src...)
	tmp := make([]float64, len(a))
	for pass := 0; pass < 3; pass++ {
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				s, n := 0.0, 0
				for k := max(0, x-r); k <= min(w-1, x+r); k++ {
					s += a[y*w+k]
					n++
				}
				tmp[y*w+x] = s / float64(n)
			}
		}
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				s, n := 0.0, 0
				for k := max(0, y-r); k <= min(h-1, y+r); k++ {
					s += tmp[k*w+x]
					n++
				}
				a[y*w+x] = s / float64(n)
			}
		}
	}
	return a
}
