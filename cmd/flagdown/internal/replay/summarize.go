package replay

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// progressCounts are the rides created so far and those whose latest accept stuck so far.
func (s *sim) progressCounts() progressCounts {
	var c progressCounts
	for _, r := range s.rides {
		if r.requested {
			c.rides++
			if r.matched() {
				c.matched++
			}
		}
	}
	return c
}

// requestedCount is how many rides this replay created.
func (s *sim) requestedCount() int {
	n := 0
	for _, r := range s.rides {
		if r.requested {
			n++
		}
	}
	return n
}

// summary assembles the figures; call it after fetchRides (when that ran) so the final statuses count.
func (s *sim) summary(tripsSent, skipped int, pingWall time.Duration) *Summary {
	o := s.opts
	sum := &Summary{
		RidesRejected: s.ridesRejected, RejectedExamples: nonNil(s.rejectedExamples),
		OffersTotal: s.offersTotal, Declines: s.declines, DeclineConflicts: s.declineConflicts,
		AcceptConflicts: s.acceptConflicts, AcceptConflictReasons: nonNilMap(s.conflictReasons),
		TransitionConflicts: s.transitionConf, RideStatusCounts: nonNilMap(s.statusCounts),
		RideFetchErrors: s.fetchErrs, FinalStatusKnown: s.fetched,
		OffersIgnored: s.offersIgnored, OfferTimeouts: s.offerTimeouts, DriversWentOffline: s.driversOffline,
		PingsTotal: s.pingsTotal.Load(), PingsSent: s.pingsSent.Load(), PingRequests: s.pingRequests.Load(), PingsSkipped: s.pingsSkipped.Load(),
		GPSRejected: s.gpsRejected.Load(), StaleRejected: s.staleRejected.Load(),
		SendRule: s.opts.SendRule, PingsSavedBySendRule: s.rule.saved.Load(),
		HTTPErrors: nonNilMap(s.httpErrors), ErrorExamples: nonNil(s.errorExamples),
		TripsInWindow: len(s.trips), TripsSkippedRows: skipped,
		Drivers: o.Drivers, Speedup: o.Speedup, WindowMinutes: o.Minutes, PingIntervalS: o.PingInterval.Seconds(),
		AcceptProb: o.AcceptProb, NoAnswerProb: o.NoAnswerProb, OfflineProbPerHour: o.OfflineProbPerHour,
		DriverSpeedMPS: o.DriverSpeedMPS, DrainS: o.Drain.Seconds(), Seed: o.Seed,
		Concurrency: o.Concurrency, BatchSize: o.BatchSize, TripsPath: o.TripsPath, URL: o.URL, RunID: o.RunID,
		VerifyGraceS: o.VerifyGrace.Seconds(), VerifyExamples: map[string][]string{},
		WindowSkipMinutes: o.SkipMinutes,
		MatchMode:         o.MatchMode, DriverStarts: string(o.DriverStarts),
		DriverStartTripsBefore: s.starts.TripsBefore, DriverStartTripsFallback: s.starts.TripsFallback,
	}
	if o.DriversDropTo > 0 {
		sum.DriversDropTo, sum.DriversDroppedBySupply, sum.DriversDropAtMin = o.DriversDropTo, s.supplyDropped, o.DriversDropAt*o.Minutes
	}
	if pingWall > 0 {
		sum.PingsPerS = float64(sum.PingsTotal) / pingWall.Seconds()
	}
	if due := sum.PingsSent + sum.PingsSavedBySendRule; due > 0 {
		sum.SendRuleSavedPct = 100 * float64(sum.PingsSavedBySendRule) / float64(due)
	}
	var ttm, dist, pw []float64
	for id, r := range s.rides {
		if !r.requested {
			continue
		}
		sum.RidesRequested++
		sum.RideIDs = append(sum.RideIDs, id)
		if r.offered {
			sum.RidesOffered++
		}
		if r.accepted {
			sum.RidesAccepted++
		}
		if r.matched() {
			sum.RidesMatched++
			ttm = append(ttm, max(0, (r.acceptedAt-r.requestedAt).Seconds()))
			dist = append(dist, r.pickupDistM)
			switch {
			case r.arrivedAt > 0:
				pw = append(pw, max(0, (r.arrivedAt-r.requestedAt).Seconds()))
			case s.simEnded > 0: // still on his way: at least until the end
				pw = append(pw, max(0, (s.simEnded-r.requestedAt).Seconds()))
				sum.PickupWaitOnTheWay++
			}
		}
		if r.completed {
			sum.RidesCompleted++
		}
		reoffered, reopened := len(r.offeredTo) > 1, r.reopened()
		if reoffered {
			sum.RidesReoffered++
		}
		if reopened {
			sum.RidesReopened++
		}
		if reoffered || reopened {
			sum.Rematches++
		}
		if r.abandonments > 0 {
			sum.OfflineRidesAbandoned++
			if reopened {
				sum.OfflineRidesReopened++
			}
			if r.rematchedAfterOffline() {
				sum.OfflineRidesRematched++
			}
		}
		if r.final != nil {
			switch r.final.Status {
			case statusUnmatched:
				sum.RidesUnmatched++
			case statusRequested:
				sum.RidesNeverMatched++
			}
		}
	}
	if sum.RidesRequested > 0 {
		sum.MatchRate = float64(sum.RidesMatched) / float64(sum.RidesRequested)
	}
	sum.TimeToMatchCount = len(ttm)
	sum.TimeToMatchP50S, sum.TimeToMatchP95S, sum.TimeToMatchP99S = Percentile(ttm, 50), Percentile(ttm, 95), Percentile(ttm, 99)
	sum.TimeToMatchMaxS = Percentile(ttm, 100)
	sum.PickupWaitCount = len(pw)
	sum.PickupWaitP50S, sum.PickupWaitP95S, sum.PickupWaitP99S = Percentile(pw, 50), Percentile(pw, 95), Percentile(pw, 99)
	sum.PickupDistanceCount = len(dist)
	sum.PickupDistanceMeanM, sum.PickupDistanceP50M, sum.PickupDistanceP95M = Mean(dist), Percentile(dist, 50), Percentile(dist, 95)
	sum.OfferLatencyCount = len(s.offerLatMs)
	sum.OfferLatencyP50Ms, sum.OfferLatencyP99Ms = Percentile(s.offerLatMs, 50), Percentile(s.offerLatMs, 99)
	sum.Push, sum.PushConnectionsLeft = o.Push, -1
	if o.Push {
		var lat []float64
		for _, r := range s.rides {
			// As offer_latency: rides offered at their first match attempt (the final GET says), so
			// a ride that waited for a driver to come free does not count its wait as push latency.
			f := r.final
			first := f != nil && f.FirstOfferedAt != nil && f.FirstMatchAt != nil && f.FirstOfferedAt.Equal(*f.FirstMatchAt)
			if first && !r.createdWall.IsZero() && !r.firstPushWall.IsZero() {
				lat = append(lat, max(0, float64(r.firstPushWall.Sub(r.createdWall))/float64(time.Millisecond)))
			}
		}
		sum.OfferPushLatencyCount = len(lat)
		sum.OfferPushLatencyP50Ms, sum.OfferPushLatencyP99Ms = Percentile(lat, 50), Percentile(lat, 99)
		sum.OffersSeenByPush, sum.OffersSeenByPing = s.offersByPush, s.offersByPing
		if n := s.offersByPush + s.offersByPing; n > 0 {
			sum.OfferPushShare = float64(s.offersByPush) / float64(n)
		}
		sum.PushMessagesReceived, sum.DriverPositionsPushed = s.push.received.Load(), s.positionsPushed
		sum.PushReconnects, sum.PushDialFailures = s.push.reconnects.Load(), s.push.dialFailures.Load()
		sum.PushMessagesLost, sum.PushLostExamples = s.lostOffers+s.lostStatuses, s.lostExamples
		sum.PushOffersLate = s.lateOffers
	}
	sum.MatchLatencyCount = len(s.matchLatMs)
	sum.MatchLatencyP50Ms, sum.MatchLatencyP99Ms = Percentile(s.matchLatMs, 50), Percentile(s.matchLatMs, 99)
	s.surgeSummary(sum)
	return sum
}

// surgeSummary fills the summary's surge and wait-estimate figures from the quotes the rides were
// ordered at. Minutes are simulated minutes since the window opened. The wait estimate (est_wait_s)
// is compared in simulated seconds, the riders' time of a platform run with FLAGDOWN_SIM_SPEEDUP =
// Speedup; what happened is request (fare-estimate) → the driver of the latest accept reaching the
// pickup, for rides accepted once that got there (WaitErrors).
func (s *sim) surgeSummary(sum *Summary) {
	byMin := map[int]*SurgeMinute{}
	var charged, computed []float64
	for _, r := range s.rides {
		q := r.quote
		if !r.requested || q == nil {
			continue
		}
		sum.SurgeQuotes++
		sum.SurgeMode = q.SurgeMode
		c := q.SurgeMultiplier
		if q.SurgeComputed != nil {
			c = *q.SurgeComputed
		}
		charged, computed = append(charged, q.SurgeMultiplier), append(computed, c)
		m := int(r.requestedAt / time.Minute)
		row := byMin[m]
		if row == nil {
			row = &SurgeMinute{Minute: m}
			byMin[m] = row
		}
		row.Quotes++
		row.charged, row.computed = append(row.charged, q.SurgeMultiplier), append(row.computed, c)
	}
	sum.SurgeChargedP50, sum.SurgeChargedMax = Percentile(charged, 50), Percentile(charged, 100)
	sum.SurgeComputedP50, sum.SurgeComputedMax = Percentile(computed, 50), Percentile(computed, 100)
	sum.SurgeByMinute = make([]SurgeMinute, 0, len(byMin))
	for _, row := range byMin {
		row.ChargedP50, row.ChargedMax = Percentile(row.charged, 50), Percentile(row.charged, 100)
		row.ComputedP50, row.ComputedMax = Percentile(row.computed, 50), Percentile(row.computed, 100)
		row.charged, row.computed = nil, nil
		sum.SurgeByMinute = append(sum.SurgeByMinute, *row)
	}
	sort.Slice(sum.SurgeByMinute, func(i, j int) bool { return sum.SurgeByMinute[i].Minute < sum.SurgeByMinute[j].Minute })
	all := s.waitSamples()
	samples, horizon := CensorWaitSamples(all, s.simEnded)
	var est, act []float64
	for _, w := range samples {
		est, act = append(est, w.QuotedS), append(act, w.ActualS())
	}
	rep := WaitErrors(samples)
	rep.Censored, rep.CensorHorizonS = len(all)-len(samples), horizon.Seconds()
	sum.WaitErrors = &rep
	sum.WaitEstimateCount = rep.Count
	sum.WaitEstimateMAES, sum.WaitEstimateMeanS, sum.WaitActualMeanS = rep.MAES, Mean(est), Mean(act)
}

// fetchRides reads every requested ride with bounded concurrency (GET /function/ride/{id}) and keeps
// each answer as the ride's final view: its status, driver and accepted_at feed the matched,
// re-opened, UNMATCHED and still-REQUESTED figures; first_offered_at − created_at (wall ms) of rides
// offered at their first match attempt the offer latency; first_match_at − created_at the match latency. It runs on the scheduler goroutine after the workers stopped.
func (s *sim) fetchRides(ctx context.Context) {
	ids := make([]string, 0, len(s.rides))
	for id, r := range s.rides {
		if r.requested {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var (
		views = make([]*RideView, len(ids))
		mu    sync.Mutex
		wg    sync.WaitGroup
		idx   atomic.Int64
	)
	for range s.opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(idx.Add(1)) - 1
				if i >= len(ids) || ctx.Err() != nil {
					return
				}
				rv, err := s.c.getRide(ctx, ids[i])
				if err == nil {
					views[i] = rv
					continue
				}
				if ctx.Err() != nil {
					return
				}
				mu.Lock()
				s.fetchErrs++
				if len(s.errorExamples) < maxExamples {
					s.errorExamples = append(s.errorExamples, "ride "+ids[i]+": "+err.Error())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s.fetched = ctx.Err() == nil
	s.statusCounts = map[string]int{}
	for i, rv := range views {
		if rv == nil {
			continue
		}
		s.rides[ids[i]].final = rv
		s.statusCounts[rv.Status]++
		if rv.CreatedAt == nil {
			continue
		}
		if rv.FirstMatchAt != nil {
			s.matchLatMs = append(s.matchLatMs, float64(rv.FirstMatchAt.Sub(*rv.CreatedAt))/float64(time.Millisecond))
		}
		// Only rides offered at their first attempt: a ride that waited for a driver to come free
		// measures the fleet's supply, not the dispatch pipeline (that is time_to_match).
		if rv.FirstOfferedAt != nil && rv.FirstMatchAt != nil && rv.FirstOfferedAt.Equal(*rv.FirstMatchAt) {
			s.offerLatMs = append(s.offerLatMs, float64(rv.FirstOfferedAt.Sub(*rv.CreatedAt))/float64(time.Millisecond))
		}
	}
}

// nonNilMap is m, or an empty map when m is nil (so the JSON summary shows {} and not null).
func nonNilMap(m map[string]int) map[string]int {
	if m == nil {
		return map[string]int{}
	}
	return m
}

// nonNil is s, or an empty slice when s is nil (so the JSON summary shows [] and not null).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
