package replay

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// WaitSample is one ride whose quoted pickup wait the replay can judge: quoted with a wait, accepted
// once, and reached by its driver. Times are simulated.
type WaitSample struct {
	// Cell is the geohash of the pickup at dispatch.SurgeCellPrecision (the cell the platform's
	// calibration keeps its correction in).
	Cell string
	// RequestedAt, AcceptedAt and ArrivedAt are when the ride was requested, when its driver's
	// accept was answered and when he reached the pickup, simulated time since the window opened.
	RequestedAt, AcceptedAt, ArrivedAt time.Duration
	// QuotedS is the wait the rider was quoted (est_wait_s), seconds in the riders' time
	// (simulated: the platform runs with FLAGDOWN_SIM_SPEEDUP = the replay's speed-up).
	QuotedS float64
	// QuotedMatchS, QuotedDriveS and QuotedCalibrationS are the quote's parts (wait_match_s,
	// wait_drive_s, wait_calibration_s), seconds; nil when the platform did not give them.
	QuotedMatchS, QuotedDriveS, QuotedCalibrationS *float64
	// Offers is how many distinct drivers the replay saw offered the ride (1: the first driver
	// offered accepted it; more: an offer was declined or ignored first).
	Offers int
}

// hasParts reports whether w's quote came with its three parts.
func (w WaitSample) hasParts() bool {
	return w.QuotedMatchS != nil && w.QuotedDriveS != nil && w.QuotedCalibrationS != nil
}

// ActualS is the wait that happened: request → driver at the pickup, simulated seconds.
func (w WaitSample) ActualS() float64 { return (w.ArrivedAt - w.RequestedAt).Seconds() }

// WaitErrorMinute is the wait estimate's error over the rides requested in one simulated minute.
type WaitErrorMinute struct {
	// Minute is the simulated minute since the window opened (0 is the first) of the requests.
	Minute int `json:"minute"`
	// Count is the rides judged.
	Count int `json:"count"`
	// MAES is the mean absolute error of the quoted wait, simulated seconds.
	MAES float64 `json:"mae_s"`
	// MeanSignedS is the mean of quoted − actual, simulated seconds (> 0: quotes too long).
	MeanSignedS float64 `json:"mean_signed_s"`
	// BaselineCount and BaselineMAES are the per-cell constant-mean baseline's samples and mean
	// absolute error over the same minute (WaitErrors).
	BaselineCount int     `json:"baseline_count"`
	BaselineMAES  float64 `json:"baseline_mae_s"`
}

// WaitErrorReport is the wait estimate's error per simulated minute and over the run, with a
// baseline to compare it with.
type WaitErrorReport struct {
	// Count, MAES and MeanSignedS are over every judged ride (MeanSignedS: quoted − actual).
	Count       int     `json:"count"`
	MAES        float64 `json:"mae_s"`
	MeanSignedS float64 `json:"mean_signed_s"`
	// BaselineCount is how many rides the baseline could predict: a ride is predicted the mean
	// actual wait of the rides of its pickup cell whose driver reached the pickup before it was
	// requested (what the platform could have known), or of the whole city when its cell had none;
	// the first rides of a run, before any pickup, are not predicted.
	BaselineCount int `json:"baseline_count"`
	// BaselineMAES is the baseline's mean absolute error over those rides, simulated seconds;
	// EstimateMAEOnBaselineS the quoted wait's over the same rides, and MAERatio their quotient
	// (the target: ≤ 0.7). 0 when the baseline predicted nothing.
	BaselineMAES           float64 `json:"baseline_mae_s"`
	EstimateMAEOnBaselineS float64 `json:"estimate_mae_on_baseline_s"`
	MAERatio               float64 `json:"mae_ratio"`
	// ByMinute is the error per simulated minute of the requests, in minute order.
	ByMinute []WaitErrorMinute `json:"by_minute"`
	// Parts is where the error comes from, over the rides quoted with their parts; nil when none was.
	Parts *WaitPartErrors `json:"parts,omitempty"`
	// Censored is how many rides that could be judged were left out because they were requested
	// less than CensorHorizonS (simulated seconds) before the replay stopped observing
	// (CensorWaitSamples: only the short waits of those minutes were seen); 0 when the report was
	// made over every sample.
	Censored       int     `json:"censored"`
	CensorHorizonS float64 `json:"censor_horizon_s"`
	// FirstOffer is the error over the rides the first driver offered accepted: what is left of
	// the error without the declined and ignored offers, which no quote can foresee (an ignored
	// offer costs its rider the whole offer window: FLAGDOWN_OFFER_WINDOW × the speed-up).
	FirstOffer WaitErrorSubset `json:"first_offer"`
}

// WaitErrorSubset is the wait estimate's error over a subset of the judged rides, simulated seconds.
type WaitErrorSubset struct {
	// Count is the rides of the subset.
	Count int `json:"count"`
	// MAES is their mean absolute error, MeanSignedS their mean quoted − actual.
	MAES        float64 `json:"mae_s"`
	MeanSignedS float64 `json:"mean_signed_s"`
}

// WaitPartErrors judges each part of the quote against the stretch of the wait it predicts: the
// match part against request → accept, the drive part against accept → arrival at the pickup.
// Signed errors are quoted − actual, simulated seconds (> 0: the part was too long).
type WaitPartErrors struct {
	// Count is the rides judged (quoted with their parts).
	Count int `json:"count"`
	// MatchMAES and MatchSignedS are the match part's mean absolute and mean signed error.
	MatchMAES    float64 `json:"match_mae_s"`
	MatchSignedS float64 `json:"match_signed_s"`
	// DriveMAES and DriveSignedS are the drive part's mean absolute and mean signed error.
	DriveMAES    float64 `json:"drive_mae_s"`
	DriveSignedS float64 `json:"drive_signed_s"`
	// CalibrationMeanS is the mean calibration part quoted: what the learned correction added.
	CalibrationMeanS float64 `json:"calibration_mean_s"`
}

// WaitErrors measures the quoted waits of samples against what happened, per simulated minute of
// the request and over all, and the per-cell constant-mean baseline (WaitErrorReport.BaselineCount)
// on the same rides. It is a pure function of samples (their order does not matter).
func WaitErrors(samples []WaitSample) WaitErrorReport {
	rep := WaitErrorReport{ByMinute: []WaitErrorMinute{}}
	if len(samples) == 0 {
		return rep
	}
	byReq := append([]WaitSample(nil), samples...)
	sort.SliceStable(byReq, func(i, j int) bool { return byReq[i].RequestedAt < byReq[j].RequestedAt })
	byArr := append([]WaitSample(nil), samples...)
	sort.SliceStable(byArr, func(i, j int) bool { return byArr[i].ArrivedAt < byArr[j].ArrivedAt })

	type acc struct {
		sum float64
		n   int
	}
	cells, city := map[string]*acc{}, acc{}
	minutes := map[int]*WaitErrorMinute{}
	var absSum, signedSum, baseAbs, estAbsOnBase float64
	next := 0
	for _, w := range byReq {
		// Every ride picked up before this request is known to the baseline.
		for next < len(byArr) && byArr[next].ArrivedAt <= w.RequestedAt {
			k := byArr[next]
			c := cells[k.Cell]
			if c == nil {
				c = &acc{}
				cells[k.Cell] = c
			}
			c.sum, c.n = c.sum+k.ActualS(), c.n+1
			city.sum, city.n = city.sum+k.ActualS(), city.n+1
			next++
		}
		a := w.ActualS()
		e := w.QuotedS - a
		absSum, signedSum = absSum+math.Abs(e), signedSum+e
		if w.Offers == 1 {
			fo := &rep.FirstOffer
			fo.Count, fo.MAES, fo.MeanSignedS = fo.Count+1, fo.MAES+math.Abs(e), fo.MeanSignedS+e
		}
		m := int(w.RequestedAt / time.Minute)
		row := minutes[m]
		if row == nil {
			row = &WaitErrorMinute{Minute: m}
			minutes[m] = row
		}
		row.Count++
		row.MAES += math.Abs(e)
		row.MeanSignedS += e
		pred, ok := 0.0, false
		if c := cells[w.Cell]; c != nil && c.n > 0 {
			pred, ok = c.sum/float64(c.n), true
		} else if city.n > 0 {
			pred, ok = city.sum/float64(city.n), true
		}
		if ok {
			rep.BaselineCount++
			baseAbs += math.Abs(pred - a)
			estAbsOnBase += math.Abs(e)
			row.BaselineCount++
			row.BaselineMAES += math.Abs(pred - a)
		}
	}
	n := float64(len(samples))
	rep.Count, rep.MAES, rep.MeanSignedS = len(samples), absSum/n, signedSum/n
	rep.Parts = partErrors(samples)
	if fo := &rep.FirstOffer; fo.Count > 0 {
		fo.MAES, fo.MeanSignedS = fo.MAES/float64(fo.Count), fo.MeanSignedS/float64(fo.Count)
	}
	if rep.BaselineCount > 0 {
		b := float64(rep.BaselineCount)
		rep.BaselineMAES, rep.EstimateMAEOnBaselineS = baseAbs/b, estAbsOnBase/b
		if rep.BaselineMAES > 0 {
			rep.MAERatio = rep.EstimateMAEOnBaselineS / rep.BaselineMAES
		}
	}
	for _, row := range minutes {
		row.MAES /= float64(row.Count)
		row.MeanSignedS /= float64(row.Count)
		if row.BaselineCount > 0 {
			row.BaselineMAES /= float64(row.BaselineCount)
		}
		rep.ByMinute = append(rep.ByMinute, *row)
	}
	sort.Slice(rep.ByMinute, func(i, j int) bool { return rep.ByMinute[i].Minute < rep.ByMinute[j].Minute })
	return rep
}

// partErrors judges the parts of the quotes of samples that have them (WaitPartErrors); nil when
// none has.
func partErrors(samples []WaitSample) *WaitPartErrors {
	var p WaitPartErrors
	for _, w := range samples {
		if !w.hasParts() {
			continue
		}
		em := *w.QuotedMatchS - (w.AcceptedAt - w.RequestedAt).Seconds()
		ed := *w.QuotedDriveS - (w.ArrivedAt - w.AcceptedAt).Seconds()
		p.Count++
		p.MatchMAES, p.MatchSignedS = p.MatchMAES+math.Abs(em), p.MatchSignedS+em
		p.DriveMAES, p.DriveSignedS = p.DriveMAES+math.Abs(ed), p.DriveSignedS+ed
		p.CalibrationMeanS += *w.QuotedCalibrationS
	}
	if p.Count == 0 {
		return nil
	}
	n := float64(p.Count)
	p.MatchMAES, p.MatchSignedS, p.DriveMAES, p.DriveSignedS = p.MatchMAES/n, p.MatchSignedS/n, p.DriveMAES/n, p.DriveSignedS/n
	p.CalibrationMeanS /= n
	return &p
}

// waitSamples are the rides of s the wait estimate is judged on (WaitSample).
func (s *sim) waitSamples() []WaitSample {
	var out []WaitSample
	for _, r := range s.rides {
		q := r.quote
		if !r.requested || q == nil || q.EstWaitS == nil || r.accepts != 1 || r.arrivedAt <= 0 {
			continue
		}
		cell := dispatch.Geohash(dispatch.Point{Lat: r.pickup.Lat, Lng: r.pickup.Lng}, dispatch.SurgeCellPrecision)
		out = append(out, WaitSample{Cell: cell, RequestedAt: r.requestedAt, AcceptedAt: r.acceptedAt, ArrivedAt: r.arrivedAt,
			QuotedS: *q.EstWaitS, QuotedMatchS: q.WaitMatchS, QuotedDriveS: q.WaitDriveS, QuotedCalibrationS: q.WaitCalibrationS,
			Offers: len(r.offeredTo)})
	}
	return out
}

// writeRows prints the report as summary table rows (nothing for a nil report).
func (r *WaitErrorReport) writeRows(row func(k, f string, a ...any)) {
	if r == nil {
		return
	}
	row("wait estimate error", "MAE %.1f s, mean signed (quoted − actual) %+.1f s simulated (n=%d; %d requested less than %.0f s before the end left out: their long waits could not be seen)",
		r.MAES, r.MeanSignedS, r.Count, r.Censored, r.CensorHorizonS)
	row("wait baseline (per-cell mean)", "MAE %.1f s against the estimate's %.1f s on the same rides: ratio %.2f (n=%d)",
		r.BaselineMAES, r.EstimateMAEOnBaselineS, r.MAERatio, r.BaselineCount)
	row("wait error, first offer accepted", "MAE %.1f s, mean signed %+.1f s simulated (n=%d of %d: no offer declined or ignored first)",
		r.FirstOffer.MAES, r.FirstOffer.MeanSignedS, r.FirstOffer.Count, r.Count)
	if p := r.Parts; p != nil {
		row("wait error by part", "match (request → accept) MAE %.1f / signed %+.1f s, drive (accept → pickup) MAE %.1f / signed %+.1f s, calibration mean %+.1f s (n=%d)",
			p.MatchMAES, p.MatchSignedS, p.DriveMAES, p.DriveSignedS, p.CalibrationMeanS, p.Count)
	}
	var b strings.Builder
	for _, m := range r.ByMinute {
		fmt.Fprintf(&b, " %d:%.0f/%+.0f", m.Minute, m.MAES, m.MeanSignedS)
	}
	row("wait error by minute", "MAE/signed s per simulated minute:%s", b.String())
}

// CensorWaitSamples keeps the samples whose wait the replay could have seen whatever its length:
// those requested at least horizon before until (when the replay stopped observing, simulated),
// horizon being the 95th percentile of the samples' actual waits. A ride requested later is among
// the samples only if its driver reached it before the run ended, i.e. only if its wait was short,
// so the late minutes hold the short waits and miss the long ones of the same minutes (right
// censoring): judged, they make the quotes look too long. It returns the kept samples (in their
// order) and the horizon; every sample and 0 when until is not known (0), nil and 0 without samples.
func CensorWaitSamples(samples []WaitSample, until time.Duration) ([]WaitSample, time.Duration) {
	if len(samples) == 0 {
		return nil, 0
	}
	if until <= 0 {
		return samples, 0
	}
	waits := make([]float64, 0, len(samples))
	for _, w := range samples {
		waits = append(waits, w.ActualS())
	}
	horizon := time.Duration(Percentile(waits, 95) * float64(time.Second))
	var kept []WaitSample
	for _, w := range samples {
		if w.RequestedAt <= until-horizon {
			kept = append(kept, w)
		}
	}
	return kept, horizon
}
