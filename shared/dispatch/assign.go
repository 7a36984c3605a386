package dispatch

import (
	"math"
	"sort"
)

// BatchAssignment is the result of Assign: which driver (column) each rider (row) gets.
type BatchAssignment struct {
	// DriverOf[i] is the column (driver index) assigned to row (rider) i, or -1 when rider i gets no
	// driver. No column appears twice.
	DriverOf []int
	// Assigned is how many riders got a driver: the largest number possible with the allowed pairs.
	Assigned int
	// Cost is the sum of the assigned pairs' costs, in the matrix's unit (metres-equivalent for
	// Score): the smallest sum among all assignments of Assigned riders.
	Cost float64
}

// Assign solves the rectangular assignment problem for riders × drivers: cost[i][j] is the cost of
// giving rider i driver j (for dispatch, Score of driver j for rider i's pickup: metres-equivalent,
// lower is better, negative allowed). A cell that is not a finite number (+Inf, −Inf, NaN) is a
// forbidden pair (driver j is not a candidate of rider i); so is a cell past the end of a shorter row
// (the number of drivers is the longest row's length).
//
// Among all assignments that give each rider at most one driver and each driver at most one rider
// using allowed pairs only, Assign returns one with the largest number of assigned riders and, among
// those, the smallest total cost (the maximum-cardinality assignment of minimum cost). Riders left
// without a driver (more riders than drivers, or no allowed driver left for them) get -1.
//
// Method: shortest augmenting paths with row and column potentials (the Hungarian algorithm in the
// form of Jonker and Volgenant, 1987), O(r² c) time for r = min(riders, drivers), c = max(riders,
// drivers), O(r c) memory. Forbidden pairs are given a finite cost larger than any difference between
// two assignments' allowed costs, so an optimal complete assignment uses as few of them as possible;
// they are then dropped. This keeps the guarantee while the costs' range times r stays far inside
// float64 precision (costs below 1e9 in magnitude, i.e. any distance on Earth in metres).
//
// Ties are broken towards lower indices, deterministically: riders are augmented in index order and,
// among columns of equal reduced cost, the lowest index is taken (the same matrix always gives the
// same assignment; with all costs equal rider i gets driver i). Among several optimal assignments the
// one returned is the first the algorithm reaches, not necessarily the lexicographically smallest.
func Assign(cost [][]float64) BatchAssignment {
	n := len(cost)
	m := 0
	for _, row := range cost {
		m = max(m, len(row))
	}
	out := BatchAssignment{DriverOf: make([]int, n)}
	for i := range out.DriverOf {
		out.DriverOf[i] = -1
	}
	allowed := func(i, j int) bool {
		return j < len(cost[i]) && !math.IsNaN(cost[i][j]) && !math.IsInf(cost[i][j], 0)
	}
	// Shift allowed costs to [0, spread] and price forbidden pairs above any allowed total.
	lo, hi, found := math.Inf(1), math.Inf(-1), false
	for i := range n {
		for j := range m {
			if allowed(i, j) {
				lo, hi, found = min(lo, cost[i][j]), max(hi, cost[i][j]), true
			}
		}
	}
	if !found {
		return out
	}
	rows, cols := n, m
	transposed := n > m // the solver needs rows ≤ columns: then drivers are the rows
	if transposed {
		rows, cols = m, n
	}
	forbidden := float64(rows)*(hi-lo) + 1
	a := make([]float64, rows*cols)
	for r := range rows {
		for c := range cols {
			i, j := r, c
			if transposed {
				i, j = c, r
			}
			if allowed(i, j) {
				a[r*cols+c] = cost[i][j] - lo
			} else {
				a[r*cols+c] = forbidden
			}
		}
	}
	colOfRow := solveRect(a, rows, cols)
	for r, c := range colOfRow {
		i, j := r, c
		if transposed {
			i, j = c, r
		}
		if !allowed(i, j) {
			continue
		}
		out.DriverOf[i] = j
		out.Assigned++
	}
	// Sum in rider order so the total does not depend on the orientation.
	for i, j := range out.DriverOf {
		if j >= 0 {
			out.Cost += cost[i][j]
		}
	}
	return out
}

// solveRect assigns every row of the rows × cols matrix a (row-major, finite, rows ≤ cols) a distinct
// column at minimum total cost and returns the column of each row. It is the shortest augmenting path
// algorithm with potentials: each row in turn is added by a Dijkstra-like search over reduced costs
// a[i][j] − u[i] − v[j] ≥ 0 from the new row to a free column, then the path is flipped.
func solveRect(a []float64, rows, cols int) []int {
	// 1-based: index 0 is the virtual column the search starts from (e-maxx formulation).
	u := make([]float64, rows+1)
	v := make([]float64, cols+1)
	rowOf := make([]int, cols+1) // rowOf[j]: the row holding column j (1-based), 0 when free
	way := make([]int, cols+1)   // previous column on the shortest path to j
	minv := make([]float64, cols+1)
	used := make([]bool, cols+1)
	inf := math.Inf(1)
	for i := 1; i <= rows; i++ {
		rowOf[0] = i
		j0 := 0
		for j := range minv {
			minv[j], used[j] = inf, false
		}
		for {
			used[j0] = true
			i0 := rowOf[j0]
			delta, j1 := inf, 0
			base := (i0 - 1) * cols
			for j := 1; j <= cols; j++ {
				if used[j] {
					continue
				}
				if cur := a[base+j-1] - u[i0] - v[j]; cur < minv[j] {
					minv[j], way[j] = cur, j0
				}
				if minv[j] < delta { // strict: the lowest column wins a tie
					delta, j1 = minv[j], j
				}
			}
			for j := 0; j <= cols; j++ {
				if used[j] {
					u[rowOf[j]] += delta
					v[j] -= delta
				} else {
					minv[j] -= delta
				}
			}
			j0 = j1
			if rowOf[j0] == 0 {
				break
			}
		}
		for j0 != 0 { // flip the path
			j1 := way[j0]
			rowOf[j0] = rowOf[j1]
			j0 = j1
		}
	}
	colOf := make([]int, rows)
	for j := 1; j <= cols; j++ {
		if rowOf[j] != 0 {
			colOf[rowOf[j]-1] = j - 1
		}
	}
	return colOf
}

// BatchCosts builds Assign's cost matrix for a batch of riders: candidates[i] are rider i's candidate
// drivers (DistanceM to his pickup, as the match function finds them). The columns are the distinct
// driver ids of all lists, sorted, returned as drivers; cell (i, j) is Score(p, candidate) when driver
// j is a candidate of rider i and +Inf (forbidden) otherwise. A driver listed twice for one rider
// keeps his lower score.
func BatchCosts(p ScoreParams, candidates [][]Candidate) (cost [][]float64, drivers []string) {
	col := map[string]int{}
	for _, cs := range candidates {
		for _, c := range cs {
			if _, ok := col[c.DriverID]; !ok {
				col[c.DriverID] = 0
				drivers = append(drivers, c.DriverID)
			}
		}
	}
	sort.Strings(drivers)
	for j, id := range drivers {
		col[id] = j
	}
	cost = make([][]float64, len(candidates))
	for i, cs := range candidates {
		row := make([]float64, len(drivers))
		for j := range row {
			row[j] = math.Inf(1)
		}
		for _, c := range cs {
			if s := Score(p, c); s < row[col[c.DriverID]] {
				row[col[c.DriverID]] = s
			}
		}
		cost[i] = row
	}
	return cost, drivers
}
