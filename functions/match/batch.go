package function

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// BatchReport counts what one batch window run did with its rides.
type BatchReport struct {
	// Rides is how many rides the window claimed; Open how many of them could still be offered
	// (REQUESTED without a live offer when the run read them).
	Rides, Open int
	// Assigned is how many rides the assignment (dispatch.Assign) gave a driver.
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

// RunBatch runs the window a match.batch.due event names (see Batch for the steps) and answers its
// report as the outcome; OutcomeDuplicate when the window was run already.
func (f *Function) RunBatch(ctx context.Context, e event.Event) (string, error) {
	var data events.MatchBatchDueData
	if err := cloudevent.DecodeData(e, &data); err != nil {
		return "", err
	}
	if data.Batch == "" || data.Batch != e.Subject() {
		return "", dispatch.Invalid("data.batch", "must equal the event subject")
	}
	if data.DeadlineMs <= 0 {
		return "", dispatch.Invalid("data.deadline_ms", "must be > 0")
	}
	ref := &lifecycle.EventRef{Consumer: Consumer, Source: e.Source(), ID: e.ID()}
	start := time.Now()
	rep, dup, err := f.Batch(ctx, data.Batch, data.DeadlineMs, ref)
	observeBatch(start, rep, dup, err)
	if dup {
		return OutcomeDuplicate, err
	}
	return rep.String(), err
}

// Batch runs the window of batch name that closed at deadlineMs, triggered by ev:
//
//  1. claims the window's rides (lifecycle.ClaimBatch: once per window; dup true when it was run);
//  2. reads those still to match (REQUESTED, no live offer) and finds each one's candidates with the
//     greedy search (expanding radius until FLAGDOWN_MIN_CANDIDATES eligible drivers, drivers
//     already offered the ride excluded), without locking anyone, all rides in the same pipelined
//     round trips (searchAll);
//  3. builds the rides × drivers cost matrix from dispatch.Score (dispatch.BatchCosts; a driver who
//     is no candidate of a ride is a forbidden pair) and solves it with dispatch.Assign: the most
//     rides served and, among those assignments, the least total score; the rides the assignment left
//     without a driver search again past the drivers it gave to other rides (wider, as greedy widens
//     past drivers other offers took) and are assigned among themselves, round after round, until no
//     round assigns anyone or none is left (assignRounds);
//  4. offers each assigned ride its driver as greedy does, through lifecycle.Service.Match under the
//     offer lock (on batchWorkers goroutines: their drivers are distinct); a ride whose driver's
//     lock is lost (another offer, he went away) falls back to its next-best candidate that the
//     window gave to no other ride, and with none left counts a failed attempt (retry timer, or
//     UNMATCHED past the retry budget) like greedy;
//  5. a ride without any candidate counts a failed attempt the same way (retry timer with backoff
//     and a wider radius, whose ride.retry puts it back into the batch);
//  6. a ride that had candidates but was assigned none in any round (every driver within its
//     largest radius went to other rides of the window) waits for the next window
//     (lifecycle.DeferToNextWindow: re-joins the batch, UNMATCHED past the retry budget);
//  7. marks the window done.
//
// Every ride's change is idempotent per (window, ride) (lifecycle.RideEvent), so a run that died
// half-way is finished by the redelivery of ev and no ride is offered twice by one window. A failed
// change does not stop the others; the errors are returned joined, the window is then not marked
// done, and the redelivered event finishes it.
func (f *Function) Batch(ctx context.Context, name string, deadlineMs int64, ev *lifecycle.EventRef) (rep BatchReport, dup bool, err error) {
	start := time.Now()
	var claimed, solved time.Time
	var w windowAssignment
	defer func() {
		if !dup && rep.Rides > 0 && !solved.IsZero() {
			f.d.Log.Debug("batch window", "batch", name, "deadline_ms", deadlineMs, "report", rep.String(),
				"cost_m", rep.AssignedCostM, "rounds", w.rounds, "late_ms", start.UnixMilli()-deadlineMs,
				"claim_ms", claimed.Sub(start).Milliseconds(), "search_ms", w.searchDur.Milliseconds(),
				"solve_ms", w.solveDur.Milliseconds(), "offer_ms", time.Since(solved).Milliseconds(), "err", err)
		}
	}()
	claim, err := f.lc.ClaimBatch(ctx, name, deadlineMs, ev)
	if err != nil {
		return rep, false, err
	}
	if claim.Done {
		return rep, true, nil
	}
	rep.Rides = len(claim.RideIDs)
	rides, offered, err := f.lc.RidesToMatch(ctx, claim.RideIDs)
	if err != nil {
		return rep, false, err
	}
	rep.Open = len(rides)
	claimed = time.Now()
	w, err = f.assignRounds(ctx, rides, offered)
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
		count(f.lc.Match(ctx, ride.ID, lifecycle.RideEvent(ev, ride.ID), f.assignedPick(i, w.driver[i], cands[i], givenTo)))
	})
	parallel(len(rest), func(k int) {
		i := rest[k]
		ride := rides[i]
		if len(cands[i]) == 0 {
			note := notes[i]
			count(f.lc.Match(ctx, ride.ID, lifecycle.RideEvent(ev, ride.ID),
				func(context.Context, *dispatch.Ride, map[string]bool, lifecycle.Window) (*dispatch.Offer, string, error) {
					return nil, note, nil
				}))
			return
		}
		note := fmt.Sprintf("batch: all %d candidates went to other rides of the window; next window", len(cands[i]))
		count(f.lc.DeferToNextWindow(ctx, ride.ID, note, lifecycle.RideEvent(ev, ride.ID)))
	})
	if len(errs) > 0 {
		return rep, false, errors.Join(errs...)
	}
	return rep, false, f.lc.FinishBatch(ctx, name, deadlineMs)
}

// maxBatchRounds bounds the assignment rounds of one window (assignRounds): each round is at least
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

// assignRounds assigns the window's rides: the first round searches every ride's candidates
// (searchAll) and solves the whole window at once (dispatch.Assign). The rides it left without a
// driver although they had candidates lost them to other rides; each further round searches those
// rides again with every driver assigned so far left out (so they widen past them, as greedy widens
// past drivers other offers locked) and solves them among themselves. Rounds stop when one assigns
// nobody, no ride is left, or after maxBatchRounds. Every round keeps the first rounds' choices, so
// the optimum among the rides' nearest drivers is kept and only rides that would otherwise wait get
// drivers further away.
func (f *Function) assignRounds(ctx context.Context, rides []*dispatch.Ride, offered map[string]map[string]bool) (windowAssignment, error) {
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
		sub := make([]*dispatch.Ride, len(todo))
		for k, i := range todo {
			sub[k] = rides[i]
		}
		t0 := time.Now()
		cands, notes, err := f.searchAll(ctx, sub, offered, taken)
		if err != nil {
			return w, err
		}
		t1 := time.Now()
		cost, drivers := dispatch.BatchCosts(f.score, cands)
		asg := dispatch.Assign(cost)
		w.searchDur, w.solveDur = w.searchDur+t1.Sub(t0), w.solveDur+time.Since(t1)
		w.assigned, w.costM = w.assigned+asg.Assigned, w.costM+asg.Cost
		next := todo[:0]
		for k, i := range todo {
			w.cands[i] = mergeCandidates(f.score, w.cands[i], cands[k])
			if len(w.cands[i]) == 0 {
				w.notes[i] = notes[k]
				continue
			}
			if j := asg.DriverOf[k]; j >= 0 {
				w.driver[i] = drivers[j]
				taken[drivers[j]] = true
			} else if len(cands[k]) > 0 {
				next = append(next, i) // lost its candidates to other rides: search past them
			}
		}
		if asg.Assigned == 0 {
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

// batchWorkers bounds the concurrent candidate searches and ride changes of one batch run: enough
// to overlap the Redis and PostgreSQL round trips of a window's rides, few enough not to take every
// connection of the pools.
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

// assignedPick is the lifecycle.Pick of ride index i of a batch: its assigned driver first, then its
// other candidates in score order that the window gave to no other ride, each under the offer lock
// exactly as greedy takes it (lockCandidate); drivers PostgreSQL has offered the ride meanwhile
// (excluded) are skipped.
func (f *Function) assignedPick(i int, assigned string, cands []dispatch.Candidate, givenTo map[string]int) lifecycle.Pick {
	return func(ctx context.Context, ride *dispatch.Ride, excluded map[string]bool, win lifecycle.Window) (*dispatch.Offer, string, error) {
		order := make([]dispatch.Candidate, 0, len(cands))
		for _, c := range cands {
			if c.DriverID == assigned {
				order = append([]dispatch.Candidate{c}, order...)
			} else if g, ok := givenTo[c.DriverID]; !ok || g == i {
				order = append(order, c)
			}
		}
		for _, c := range order {
			if excluded[c.DriverID] {
				continue
			}
			offer, err := f.lockCandidate(ctx, ride, c, win)
			if err != nil || offer != nil {
				return offer, "", err
			}
		}
		return nil, fmt.Sprintf("batch: the assigned driver and %d other candidates were taken by other offers", len(order)-1), nil
	}
}

// searchAll runs the greedy candidate search for every ride of a window without locking anyone:
// for each ride the expanding radii (Radii, widened on retries) until FLAGDOWN_MIN_CANDIDATES
// eligible drivers are found, its excluded drivers (offered) and the drivers taken by other rides of
// the window (taken: an earlier round's assignment) left out, exactly as greedy decides to widen. The
// rides search side by side, one radius step at a time: each step is one pipelined round trip of
// GEOSEARCHes and one of the candidates' heartbeats and state, whatever the number of rides. It
// returns each ride's candidates ranked by dispatch.Score (best first), or none and the note greedy
// would record.
func (f *Function) searchAll(ctx context.Context, rides []*dispatch.Ride, offered map[string]map[string]bool, taken map[string]bool) ([][]dispatch.Candidate, []string, error) {
	c := f.d.Config
	cands := make([][]dispatch.Candidate, len(rides))
	notes := make([]string, len(rides))
	radii := make([][]float64, len(rides))
	pending := make([]int, 0, len(rides))
	for i, r := range rides {
		radii[i] = Radii(c.SearchRadiiM, r.MatchAttempts)
		pending = append(pending, i)
	}
	for step := 0; len(pending) > 0; step++ {
		qs := make([]redisstore.NearbyQuery, len(pending))
		for k, i := range pending {
			qs[k] = redisstore.NearbyQuery{Center: rides[i].Pickup, RadiusM: radii[i][step], Count: c.SearchCount + len(offered[rides[i].ID]) + len(taken)}
		}
		hits, err := f.d.Redis.NearbyMany(ctx, qs)
		if err != nil {
			return nil, nil, err
		}
		var ids []string
		seen := map[string]bool{}
		for k, i := range pending {
			for _, h := range hits[k] {
				if !offered[rides[i].ID][h.DriverID] && !taken[h.DriverID] && !seen[h.DriverID] {
					seen[h.DriverID] = true
					ids = append(ids, h.DriverID)
				}
			}
		}
		infoList, err := f.d.Redis.DriverInfos(ctx, ids)
		if err != nil {
			return nil, nil, err
		}
		infos := make(map[string]redisstore.DriverInfo, len(ids))
		for k, id := range ids {
			infos[id] = infoList[k]
		}
		now := time.Now()
		next := pending[:0]
		for k, i := range pending {
			keep := make([]redisstore.GeoHit, 0, len(hits[k]))
			kinfo := make([]redisstore.DriverInfo, 0, len(hits[k]))
			for _, h := range hits[k] {
				if !offered[rides[i].ID][h.DriverID] && !taken[h.DriverID] {
					keep = append(keep, h)
					kinfo = append(kinfo, infos[h.DriverID])
				}
			}
			found := candidatesOf(keep, kinfo, now)
			last := step == len(radii[i])-1
			if !last && (len(found) == 0 || (len(found) < c.MinCandidates && len(hits[k]) < qs[k].Count)) {
				next = append(next, i) // too few here: widen before choosing
				continue
			}
			if len(found) > 0 {
				dispatch.Rank(f.score, found)
				cands[i] = found
			} else {
				notes[i] = fmt.Sprintf("no available driver within %.0f m", radii[i][len(radii[i])-1])
			}
		}
		pending = next
	}
	return cands, notes, nil
}
