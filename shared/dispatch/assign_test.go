package dispatch_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

var inf = math.Inf(1)

func TestAssign(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cost     [][]float64
		want     []int
		wantCost float64
	}{
		{"Empty", nil, []int{}, 0},
		{"NoDrivers", [][]float64{{}, {}}, []int{-1, -1}, 0},
		{"OneByOne", [][]float64{{7}}, []int{0}, 7},
		// The classic 3×3: row minima (1, 0, 2) collide on column 1; the optimum is 1 + 2 + 2.
		{"Square", [][]float64{{4, 1, 3}, {2, 0, 5}, {3, 2, 2}}, []int{1, 0, 2}, 5},
		// Greedy in rider order gives rider 0 its nearest (1) and rider 1 the far one (100): 101.
		{"BeatsGreedy", [][]float64{{1, 2}, {2, 100}}, []int{1, 0}, 4},
		{"FewerRiders", [][]float64{{9, 3, 8, 1}, {9, 2, 8, 1}}, []int{3, 1}, 3},
		{"MoreRiders", [][]float64{{5, 9}, {1, 1}, {4, 2}, {0, 8}}, []int{-1, 1, -1, 0}, 1},
		// Cardinality first: two riders served for 5 beat one served for −5.
		{"MaxCardinalityFirst", [][]float64{{-5, 10}, {-5, inf}}, []int{1, 0}, 5},
		{"ForbiddenRow", [][]float64{{inf, inf}, {3, 4}}, []int{-1, 0}, 3},
		{"AllForbidden", [][]float64{{inf, math.NaN()}, {math.Inf(-1), inf}}, []int{-1, -1}, 0},
		{"NaNAndMinusInfForbidden", [][]float64{{math.NaN(), 2}, {math.Inf(-1), 3}}, []int{1, -1}, 2},
		// A short row forbids the drivers past its end.
		{"RaggedRow", [][]float64{{1}, {5, 2, 9}}, []int{0, 1}, 3},
		{"Negative", [][]float64{{-300, -100}, {-250, -260}}, []int{0, 1}, -560},
		{"TiesSquare", [][]float64{{4, 4, 4}, {4, 4, 4}, {4, 4, 4}}, []int{0, 1, 2}, 12},
		{"TiesWide", [][]float64{{1, 1, 1, 1}, {1, 1, 1, 1}}, []int{0, 1}, 2},
		{"TiesTall", [][]float64{{2, 2}, {2, 2}, {2, 2}}, []int{0, 1, -1}, 4},
		{"TieGoesToLowerDriver", [][]float64{{3, 1, 1}}, []int{1}, 1},
		{"TieGoesToLowerRider", [][]float64{{1}, {1}}, []int{0, -1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := dispatch.Assign(tt.cost)
			if !slices.Equal(got.DriverOf, tt.want) || got.Cost != tt.wantCost {
				t.Fatalf("Assign = %v cost %v, want %v cost %v", got.DriverOf, got.Cost, tt.want, tt.wantCost)
			}
			n := 0
			for _, j := range got.DriverOf {
				if j >= 0 {
					n++
				}
			}
			if got.Assigned != n {
				t.Fatalf("Assigned %d, %d riders have a driver", got.Assigned, n)
			}
		})
	}
}

// bruteForce returns the largest number of riders an assignment over allowed pairs can serve and the
// smallest total cost with that many, by trying every partial injective assignment.
func bruteForce(cost [][]float64) (best int, bestCost float64) {
	m := 0
	for _, row := range cost {
		m = max(m, len(row))
	}
	taken := make([]bool, m)
	bestCost = 0
	var walk func(i, k int, sum float64)
	walk = func(i, k int, sum float64) {
		if i == len(cost) {
			if k > best || (k == best && sum < bestCost) {
				best, bestCost = k, sum
			}
			return
		}
		walk(i+1, k, sum) // rider i unassigned
		for j, c := range cost[i] {
			if taken[j] || math.IsNaN(c) || math.IsInf(c, 0) {
				continue
			}
			taken[j] = true
			walk(i+1, k+1, sum+c)
			taken[j] = false
		}
	}
	walk(0, 0, 0)
	return best, bestCost
}

// checkAgainstBruteForce fails t unless Assign(cost) is a valid assignment over allowed pairs whose
// cardinality and cost equal the brute force optimum, and Assign is deterministic.
func checkAgainstBruteForce(t *testing.T, cost [][]float64) {
	t.Helper()
	got := dispatch.Assign(cost)
	if len(got.DriverOf) != len(cost) {
		t.Fatalf("%v: %d entries for %d riders", cost, len(got.DriverOf), len(cost))
	}
	seen := map[int]bool{}
	sum, n := 0.0, 0
	for i, j := range got.DriverOf {
		if j == -1 {
			continue
		}
		if j < 0 || j >= len(cost[i]) || math.IsNaN(cost[i][j]) || math.IsInf(cost[i][j], 0) {
			t.Fatalf("%v: rider %d got forbidden or unknown driver %d", cost, i, j)
		}
		if seen[j] {
			t.Fatalf("%v: driver %d assigned twice (%v)", cost, j, got.DriverOf)
		}
		seen[j] = true
		sum += cost[i][j]
		n++
	}
	if n != got.Assigned || sum != got.Cost {
		t.Fatalf("%v: Assigned %d Cost %v, but the assignment %v has %d for %v", cost, got.Assigned, got.Cost, got.DriverOf, n, sum)
	}
	wantN, wantCost := bruteForce(cost)
	if n != wantN || math.Abs(sum-wantCost) > 1e-9*max(1, math.Abs(wantCost)) {
		t.Fatalf("%v: Assign %v serves %d for %v; brute force serves %d for %v", cost, got.DriverOf, n, sum, wantN, wantCost)
	}
	if again := dispatch.Assign(cost); !slices.Equal(again.DriverOf, got.DriverOf) {
		t.Fatalf("%v: not deterministic: %v then %v", cost, got.DriverOf, again.DriverOf)
	}
}

// matrixFrom decodes a ≤ 6×6 cost matrix from fuzz bytes: the first two give the size, each further
// byte a cell. Cells are small integers −4..10 (many ties), some with a fraction, or forbidden (+Inf,
// NaN, −Inf); missing bytes leave the row short (ragged).
func matrixFrom(b []byte) [][]float64 {
	if len(b) < 2 {
		return nil
	}
	n, m := int(b[0]%7), int(b[1]%7)
	b = b[2:]
	cost := make([][]float64, n)
	for i := range cost {
		for range m {
			if len(b) == 0 {
				break
			}
			x := b[0]
			b = b[1:]
			var c float64
			switch {
			case x%11 == 0:
				c = inf
			case x == 255:
				c = math.NaN()
			case x == 254:
				c = math.Inf(-1)
			default:
				c = float64(int(x%15) - 4)
				if x >= 200 {
					c += float64(x%7) / 8
				}
			}
			cost[i] = append(cost[i], c)
		}
	}
	return cost
}

func FuzzAssign(f *testing.F) {
	f.Add([]byte{3, 3, 8, 5, 7, 6, 4, 9, 7, 6, 6})
	f.Add([]byte{6, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Add([]byte{4, 2, 0, 11, 5, 22, 0, 0, 7, 8})
	f.Add([]byte{2, 5, 200, 201, 202, 203, 204, 11, 22, 33, 44, 5})
	f.Add([]byte{5, 5, 255, 254, 3, 3, 3, 11, 11, 11, 4, 4, 3, 3, 3, 3, 3, 9, 9, 9, 9, 9, 1, 2, 3, 4, 5})
	f.Add([]byte{6, 3, 1, 2})
	f.Add([]byte{1, 6, 14, 13, 12, 11, 10, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		checkAgainstBruteForce(t, matrixFrom(b))
	})
}

// TestAssignMatchesBruteForce runs the fuzz target's check on seeded random matrices, so a plain go
// test covers more than the seed corpus.
func TestAssignMatchesBruteForce(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 0))
	b := make([]byte, 2+36)
	for range 3000 {
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		checkAgainstBruteForce(t, matrixFrom(b))
	}
	// Real-valued costs (metres) with forbidden cells, no ties.
	for range 500 {
		n, m := 1+rng.IntN(6), 1+rng.IntN(6)
		cost := make([][]float64, n)
		for i := range cost {
			cost[i] = make([]float64, m)
			for j := range cost[i] {
				cost[i][j] = rng.Float64()*8000 - 500
				if rng.IntN(4) == 0 {
					cost[i][j] = inf
				}
			}
		}
		checkAgainstBruteForce(t, cost)
	}
}

func TestAssignTransposeInvariant(t *testing.T) {
	t.Parallel()
	// Riders × drivers and drivers × riders are the same problem: same cardinality, same cost.
	rng := rand.New(rand.NewPCG(5, 0))
	for range 200 {
		n, m := 1+rng.IntN(30), 1+rng.IntN(30)
		cost := make([][]float64, n)
		tr := make([][]float64, m)
		for j := range tr {
			tr[j] = make([]float64, n)
		}
		for i := range cost {
			cost[i] = make([]float64, m)
			for j := range cost[i] {
				c := float64(rng.IntN(5000))
				if rng.IntN(3) == 0 {
					c = inf
				}
				cost[i][j], tr[j][i] = c, c
			}
		}
		a, b := dispatch.Assign(cost), dispatch.Assign(tr)
		if a.Assigned != b.Assigned || a.Cost != b.Cost {
			t.Fatalf("%d×%d: %d for %v; transposed %d for %v", n, m, a.Assigned, a.Cost, b.Assigned, b.Cost)
		}
	}
}

func TestBatchCosts(t *testing.T) {
	t.Parallel()
	p := dispatch.ScoreParams{IdleBonusMPerMin: 10, IdleCapMin: 30, RatingBonusM: 100, DefaultRating: 4.5, MissPenaltyM: 500, MissMemory: time.Hour}
	cands := [][]dispatch.Candidate{
		{{DriverID: "d-b", DistanceM: 400}, {DriverID: "d-a", DistanceM: 900, IdleS: 600}},
		{{DriverID: "d-c", DistanceM: 300, Rating: 5}, {DriverID: "d-b", DistanceM: 200}, {DriverID: "d-b", DistanceM: 250}},
		{},
	}
	cost, drivers := dispatch.BatchCosts(p, cands)
	if !slices.Equal(drivers, []string{"d-a", "d-b", "d-c"}) {
		t.Fatalf("drivers %v", drivers)
	}
	want := [][]float64{
		{900 - 10*10, 400, inf},
		{inf, 200, 300 - 100*0.5},
		{inf, inf, inf},
	}
	for i := range want {
		if !slices.Equal(cost[i], want[i]) {
			t.Fatalf("row %d = %v, want %v", i, cost[i], want[i])
		}
	}
	// Jointly: d-b (400) + d-c (250) = 650 beats d-a (800) + d-b (200) = 1000, although rider 1's
	// best alone is d-b.
	got := dispatch.Assign(cost)
	if !slices.Equal(got.DriverOf, []int{1, 2, -1}) || got.Cost != 650 {
		t.Fatalf("Assign = %v cost %v, want [1 2 -1] cost 650", got.DriverOf, got.Cost)
	}
}

// BenchmarkAssign solves a batch of 50 riders over 200 drivers, each rider with his 20 nearest
// drivers as candidates (the rest forbidden), and a dense one with every pair allowed.
func BenchmarkAssign(b *testing.B) {
	for _, bc := range []struct {
		name       string
		candidates int
	}{{"50x200_20candidates", 20}, {"50x200_dense", 200}} {
		b.Run(bc.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			const riders, drivers = 50, 200
			cost := make([][]float64, riders)
			for i := range cost {
				cost[i] = make([]float64, drivers)
				for j := range cost[i] {
					cost[i][j] = inf
				}
				for _, j := range rng.Perm(drivers)[:bc.candidates] {
					cost[i][j] = rng.Float64() * 4000
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if a := dispatch.Assign(cost); a.Assigned == 0 {
					b.Fatal("nobody assigned")
				}
			}
		})
	}
}
