package matching

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/lifecycle"
)

// BatchReport counts what one batch window run did with its rides.
type BatchReport struct {
	// Rides is how many rides the window claimed; Open how many of them could still be offered
	// (REQUESTED without a live offer when the run read them).
	Rides, Open int
	// Assigned is how many rides the assignment (the Planner, over all rounds) gave a driver.
	Assigned int
	// Offered, NoDriver, Deferred, Unmatched, NotNeeded and Duplicate count the outcomes of the
	// rides' changes (lifecycle.Match*): Offered includes rides that fell back to another candidate
	// after losing their assigned driver's lock; Deferred rides wait for the next window.
	Offered, NoDriver, Deferred, Unmatched, NotNeeded, Duplicate int
	// AssignedCostM is the total score of the assigned pairs (metres-equivalent, dispatch.Score).
	AssignedCostM float64
}

// String is the report as the event's outcome.
func (r BatchReport) String() string {
	return fmt.Sprintf("batch: %d rides (%d open, %d assigned): %d offered, %d no driver, %d deferred, %d unmatched, %d not needed, %d duplicate",
		r.Rides, r.Open, r.Assigned, r.Offered, r.NoDriver, r.Deferred, r.Unmatched, r.NotNeeded, r.Duplicate)
}

// RunWindow runs the window of batch name that closed at deadlineMs (Unix ms), triggered by ev:
//
//  1. claims the window's rides (Lifecycle ClaimBatch: once per window; dup true when it was run);
//  2. reads those still to match (REQUESTED, no live offer) and finds each one's candidates with the
//     candidate search (radius by radius until widen stops it, drivers already offered the ride
//     excluded), without locking anyone, all rides in the same pipelined round trips (searchAll);
//  3. assigns them with the Planner (LeastTotalScore: the most rides served and, among those
//     assignments, the least total score); the rides the plan left without a driver search again
//     past the drivers it gave to other rides (wider, as greedy widens past drivers other offers
//     took) and are planned among themselves, round after round, until no round assigns anyone or
//     none is left (planRounds);
//  4. offers each assigned ride its driver as greedy does, through Lifecycle Match under the offer
//     lock (lockCandidate, on batchWorkers goroutines: their drivers are distinct); a ride whose
//     driver's lock is lost (another offer, he went away) falls back to its next-best candidate
//     that the window gave to no other ride (fallbackOrder), and with none left counts a failed
//     attempt (retry timer, or UNMATCHED past the retry budget) like greedy;
//  5. a ride without any candidate counts a failed attempt the same way (retry timer with backoff
//     and a wider radius, whose ride.retry puts it back into the batch);
//  6. a ride that had candidates but was assigned none in any round (every driver within its
//     largest radius went to other rides of the window) waits for the next window (Lifecycle
//     DeferToNextWindow: re-joins the batch, UNMATCHED past the retry budget);
//  7. marks the window done.
//
// Every ride's change is idempotent per (window, ride) (lifecycle.RideEvent), so a run that died
// half-way is finished by the redelivery of ev and no ride is offered twice by one window. A failed
// change does not stop the others; the errors are returned joined, the window is then not marked
// done, and the redelivered event finishes it.
func (m *Matcher) RunWindow(ctx context.Context, name string, deadlineMs int64, ev *lifecycle.EventRef) (rep BatchReport, dup bool, err error) {
	start := time.Now()
	var claimed, solved time.Time
	var w windowAssignment
	defer func() {
		if !dup && rep.Rides > 0 && !solved.IsZero() {
			m.log.Debug("batch window", "batch", name, "deadline_ms", deadlineMs, "report", rep.String(),
				"cost_m", rep.AssignedCostM, "rounds", w.rounds, "late_ms", start.UnixMilli()-deadlineMs,
				"claim_ms", claimed.Sub(start).Milliseconds(), "search_ms", w.searchDur.Milliseconds(),
				"solve_ms", w.solveDur.Milliseconds(), "offer_ms", time.Since(solved).Milliseconds(), "err", err)
		}
	}()
	claim, err := m.lc.ClaimBatch(ctx, name, deadlineMs, ev)
	if err != nil {
		return rep, false, err
	}
	if claim.Done {
		return rep, true, nil
	}
	rep.Rides = len(claim.RideIDs)
	rides, offered, err := m.lc.RidesToMatch(ctx, claim.RideIDs)
	if err != nil {
		return rep, false, err
	}
	rep.Open = len(rides)
	claimed = time.Now()
	w, err = planRounds(m.planner, m.p.Score, rides, func(todo []int, taken map[string]bool) ([][]dispatch.Candidate, []string, error) {
		sub := make([]*dispatch.Ride, len(todo))
		for k, i := range todo {
			sub[k] = rides[i]
		}
		return m.searchAll(ctx, sub, offered, taken)
	})
	if err != nil {
		return rep, false, err
	}
	solved = time.Now()
	cands, notes := w.cands, w.notes
	rep.Assigned, rep.AssignedCostM = w.assigned, w.costM
	givenTo := map[string]int{} // driver id → the ride index the assignment gave him
	for i, d := range w.driver {
		if d != "" {
			givenTo[d] = i
		}
	}
	var errs []error
	var mu sync.Mutex
	count := func(out string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		switch out {
		case lifecycle.MatchOffered:
			rep.Offered++
		case lifecycle.MatchNoDriver:
			rep.NoDriver++
		case lifecycle.MatchDeferred:
			rep.Deferred++
		case lifecycle.MatchUnmatched:
			rep.Unmatched++
		case lifecycle.MatchDuplicate:
			rep.Duplicate++
		default:
			rep.NotNeeded++
		}
	}
	// Assigned rides first, so that nobody else's fallback takes a driver the assignment gave them.
	// Their drivers are distinct, so their offers do not compete for a lock and run in parallel.
	var assigned, rest []int
	for i := range rides {
		if w.driver[i] != "" {
			assigned = append(assigned, i)
		} else {
			rest = append(rest, i)
		}
	}
	parallel(len(assigned), func(k int) {
		i := assigned[k]
		ride := rides[i]
		count(m.lc.Match(ctx, ride.ID, lifecycle.RideEvent(ev, ride.ID), m.assignedPick(fallbackOrder(i, w.driver[i], cands[i], givenTo))))
	})
	parallel(len(rest), func(k int) {
		i := rest[k]
		ride := rides[i]
		if len(cands[i]) == 0 {
			note := notes[i]
			count(m.lc.Match(ctx, ride.ID, lifecycle.RideEvent(ev, ride.ID),
				func(context.Context, *dispatch.Ride, map[string]bool, lifecycle.Window) (*dispatch.Offer, string, error) {
					return nil, note, nil
				}))
			return
		}
		note := fmt.Sprintf("batch: all %d candidates went to other rides of the window; next window", len(cands[i]))
		count(m.lc.DeferToNextWindow(ctx, ride.ID, note, lifecycle.RideEvent(ev, ride.ID)))
	})
	if len(errs) > 0 {
		return rep, false, errors.Join(errs...)
	}
	return rep, false, m.lc.FinishBatch(ctx, name, deadlineMs)
}

// batchWorkers bounds the concurrent ride changes of one batch run: enough to overlap the Redis
// and PostgreSQL round trips of a window's rides, few enough not to take every connection of the
// pools.
const batchWorkers = 8

// parallel calls fn(0..n-1) on at most batchWorkers goroutines and waits for them.
func parallel(n int, fn func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, batchWorkers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// assignedPick is the lifecycle.Pick of an assigned ride of a batch window: its candidates in
// order (fallbackOrder: the assigned driver first), each under the offer lock exactly as greedy
// takes it (lockCandidate); drivers PostgreSQL has offered the ride meanwhile (excluded) are
// skipped.
func (m *Matcher) assignedPick(order []dispatch.Candidate) lifecycle.Pick {
	return func(ctx context.Context, ride *dispatch.Ride, excluded map[string]bool, win lifecycle.Window) (*dispatch.Offer, string, error) {
		for _, c := range order {
			if excluded[c.DriverID] {
				continue
			}
			offer, err := m.lockCandidate(ctx, ride, c, win)
			if err != nil || offer != nil {
				return offer, "", err
			}
		}
		return nil, fmt.Sprintf("batch: the assigned driver and %d other candidates were taken by other offers", len(order)-1), nil
	}
}
