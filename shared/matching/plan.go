package matching

import (
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Input is what a Planner decides over: the open rides of one assignment round and each one's
// candidates. It is plain data, built by the candidate search (searchAll) or by hand in tests.
type Input struct {
	// Rides are the rides to assign.
	Rides []*dispatch.Ride
	// Candidates are each ride's candidates (same index as Rides), ranked best first by
	// dispatch.Rank; a ride with none cannot be assigned.
	Candidates [][]dispatch.Candidate
	// Now is when the round is planned, for planners that weigh how long rides have waited.
	Now time.Time
}

// Plan is a Planner's answer for one Input.
type Plan struct {
	// Driver is the driver given each ride (same index as Input.Rides), "" for none; never the same
	// driver twice, and only one of the ride's candidates.
	Driver []string
	// Assigned counts the rides given a driver; CostM is the total score of those pairs
	// (metres-equivalent, dispatch.Score).
	Assigned int
	CostM    float64
}

// Planner assigns drivers to the rides of one batch window round. Implementations are pure: they
// read nothing but in. LeastTotalScore is batch mode's; WaitWeighted, which weighs rides by how
// long they have waited, auto mode's.
type Planner interface {
	Plan(in Input) Plan
}

// LeastTotalScore is the batch planner: the most rides served and, among those assignments, the
// least total score (dispatch.BatchCosts over Score, a driver who is no candidate of a ride being a
// forbidden pair, solved by dispatch.Assign).
type LeastTotalScore struct {
	// Score weighs the pairs.
	Score dispatch.ScoreParams
}

// Plan assigns in's rides at the least total score among the assignments serving the most rides.
func (l LeastTotalScore) Plan(in Input) Plan {
	cost, drivers := dispatch.BatchCosts(l.Score, in.Candidates)
	asg := dispatch.Assign(cost)
	p := Plan{Driver: make([]string, len(in.Rides)), Assigned: asg.Assigned, CostM: asg.Cost}
	for i, j := range asg.DriverOf {
		if j >= 0 {
			p.Driver[i] = drivers[j]
		}
	}
	return p
}

// WaitWeighted is the planner of auto mode: LeastTotalScore's rule (the most rides served, then the
// least total cost) over scores discounted by how long each ride has waited since its request,
// WeightMPerS metres per second up to CapS seconds. Among the assignments serving the most rides the
// discount of a ride counts only when it is served, so when supply is short the rides that waited
// longest are the ones served, and a ride passed over window after window is not starved by newer
// rides nearer the drivers; the pairs among the rides served are those of LeastTotalScore.
type WaitWeighted struct {
	// Score weighs the pairs.
	Score dispatch.ScoreParams
	// WeightMPerS is the discount, metres of score per second waited (≥ 0); CapS the most seconds
	// counted.
	WeightMPerS, CapS float64
}

// Plan assigns in's rides at the least total discounted cost among the assignments serving the most
// rides; Plan.CostM is the undiscounted score of the pairs chosen.
func (w WaitWeighted) Plan(in Input) Plan {
	cost, drivers := dispatch.BatchCosts(w.Score, in.Candidates)
	for i, row := range cost {
		waited := 0.0
		if r := in.Rides[i]; !r.CreatedAt.IsZero() && !in.Now.IsZero() {
			waited = min(max(0, in.Now.Sub(r.CreatedAt).Seconds()), w.CapS)
		}
		for j := range row {
			row[j] -= w.WeightMPerS * waited // +Inf (forbidden) stays +Inf
		}
	}
	asg := dispatch.Assign(cost)
	p := Plan{Driver: make([]string, len(in.Rides)), Assigned: asg.Assigned}
	for i, j := range asg.DriverOf {
		if j < 0 {
			continue
		}
		p.Driver[i] = drivers[j]
		for _, c := range in.Candidates[i] {
			if c.DriverID == drivers[j] {
				p.CostM += dispatch.Score(w.Score, c)
				break
			}
		}
	}
	return p
}

// maxBatchRounds bounds the assignment rounds of one window (planRounds): each round is at least
// two pipelined round trips for its rides, and a ride still without a driver after the last one
// waits for the next window, whose search no longer sees the drivers offered meanwhile.
const maxBatchRounds = 8

// windowAssignment is what the assignment rounds of one window decided for its rides (same indices
// as the rides).
type windowAssignment struct {
	// cands are each ride's candidates over all rounds, best first (dispatch.Rank); none when no
	// round found any, notes then saying why (greedy's note).
	cands [][]dispatch.Candidate
	notes []string
	// driver is the driver each ride was assigned, "" for none; no driver twice.
	driver []string
	// assigned counts the rides given a driver, costM their total score (metres-equivalent).
	assigned int
	costM    float64
	// rounds is how many rounds ran; searchDur and solveDur the time spent searching and solving.
	rounds              int
	searchDur, solveDur time.Duration
}

// roundSearch searches the candidates of the given rides (indices into the window's rides) with
// the drivers taken so far left out: each ride's candidates ranked best first, or none and a note.
type roundSearch func(rides []int, taken map[string]bool) ([][]dispatch.Candidate, []string, error)

// planRounds assigns the n rides of a window with planner: the first round searches every ride's
// candidates and plans the whole window at once. The rides it left without a driver although they
// had candidates lost them to other rides; each further round searches those rides again with
// every driver assigned so far left out (so they widen past them, as greedy widens past drivers
// other offers locked) and plans them among themselves. Rounds stop when one assigns nobody, no ride
// is left, or after maxBatchRounds. Every round keeps the earlier rounds' choices, so the plan
// among the rides' nearest drivers is kept and only rides that would otherwise wait get drivers
// further away.
func planRounds(planner Planner, score dispatch.ScoreParams, rides []*dispatch.Ride, search roundSearch) (windowAssignment, error) {
	w := windowAssignment{
		cands: make([][]dispatch.Candidate, len(rides)), notes: make([]string, len(rides)),
		driver: make([]string, len(rides)),
	}
	taken := map[string]bool{}
	todo := make([]int, len(rides))
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 && w.rounds < maxBatchRounds {
		w.rounds++
		t0 := time.Now()
		cands, notes, err := search(todo, taken)
		if err != nil {
			return w, err
		}
		t1 := time.Now()
		in := Input{Rides: make([]*dispatch.Ride, len(todo)), Candidates: cands, Now: t1}
		for k, i := range todo {
			in.Rides[k] = rides[i]
		}
		plan := planner.Plan(in)
		w.searchDur, w.solveDur = w.searchDur+t1.Sub(t0), w.solveDur+time.Since(t1)
		w.assigned, w.costM = w.assigned+plan.Assigned, w.costM+plan.CostM
		next := todo[:0]
		for k, i := range todo {
			w.cands[i] = mergeCandidates(score, w.cands[i], cands[k])
			if len(w.cands[i]) == 0 {
				w.notes[i] = notes[k]
				continue
			}
			if d := plan.Driver[k]; d != "" {
				w.driver[i] = d
				taken[d] = true
			} else if len(cands[k]) > 0 {
				next = append(next, i) // lost its candidates to other rides: search past them
			}
		}
		if plan.Assigned == 0 {
			break
		}
		todo = next
	}
	return w, nil
}

// mergeCandidates returns the candidates of older and newer (a later round's search of the same
// ride), each driver once (his newer entry), ranked by dispatch.Score.
func mergeCandidates(p dispatch.ScoreParams, older, newer []dispatch.Candidate) []dispatch.Candidate {
	if len(older) == 0 {
		return newer
	}
	out := append([]dispatch.Candidate(nil), newer...)
	have := make(map[string]bool, len(newer))
	for _, c := range newer {
		have[c.DriverID] = true
	}
	for _, c := range older {
		if !have[c.DriverID] {
			out = append(out, c)
		}
	}
	dispatch.Rank(p, out)
	return out
}

// fallbackOrder is the order in which ride index i of a window is offered its candidates cands
// (ranked best first): its assigned driver first, then the others in rank order that the window
// gave to no other ride (givenTo: driver id → the ride index he was assigned).
func fallbackOrder(i int, assigned string, cands []dispatch.Candidate, givenTo map[string]int) []dispatch.Candidate {
	order := make([]dispatch.Candidate, 0, len(cands))
	for _, c := range cands {
		if c.DriverID == assigned {
			order = append([]dispatch.Candidate{c}, order...)
		} else if g, ok := givenTo[c.DriverID]; !ok || g == i {
			order = append(order, c)
		}
	}
	return order
}
