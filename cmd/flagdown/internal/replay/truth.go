package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/logging"
)

// The replay is the ground truth of a run: it knows when each simulated driver really stopped
// pinging and which answers it got. At the end (Options.GroundTruth) it reads what the platform
// decided from PostgreSQL (the outbox events that announce offline decisions, the rides and their
// transitions) and, for drivers PostgreSQL says nothing about, Redis's presence, and judges:
//
//   - false offline: a driver taken offline (driver.status.changed to offline, ride.reopened with
//     reason driver_offline naming him, ride.driver.offline naming him, or a ping answer of his
//     saying offline although he did not ask for it) while he was still pinging;
//   - missed offline: a driver who really stopped and was not taken offline by his deadline: his last
//     answered ping + heartbeat TTL + OfflineGrace, or, when an outage overlaps that span, the end
//     of the outage + 2 × TTL; the replay's own end, when every driver falls silent at once, is an
//     outage without end from the moment the offline brake may take it for a mass lapse
//     (truthInput.silentOutage);
//   - false reopen: a ride re-opened without cause (reason driver_offline while its driver was
//     pinging, or any other reason: the replay's drivers never cancel);
//   - false trip alert: ride.driver.offline for a ride whose driver was pinging;
//   - acked not reflected: a 2xx answer to accept, start or complete whose effect is not in the final
//     PostgreSQL state.

// Outage is a span of wall time in which a part the liveness decisions rest on (Redis, the
// platform's processes) was away: a deadline that falls in it may be decided later (within 2 ×
// heartbeat TTL of To).
type Outage struct {
	// What names the fault (e.g. redis_sigstop).
	What string `json:"what"`
	// From is when it began; To when the part was seen healthy again (zero: not yet).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// DefaultOfflineGrace is the default Options.OfflineGrace: the "within TTL + 2 s".
const DefaultOfflineGrace = 2 * time.Second

// ack is a 2xx answer to a driver action (accept, start, complete).
type ack struct {
	action, rideID, driverID string
	at                       time.Time
}

// offlineDecision is one decision of the platform that took a driver offline, as PostgreSQL
// records it (or as a ping answer showed it).
type offlineDecision struct {
	kind     string // driver_offline, ride_reopened, ride_driver_offline, ping_answer
	driverID string
	rideID   string
	reason   string
	at       time.Time
}

// driverTruth is what the replay knows of one driver.
type driverTruth struct {
	id string
	// stopped is when he stopped pinging for good (zero: never); signedOff when he ended his shift
	// with an offline ping (supply drop: the platform needs no lapse to know).
	stopped   time.Time
	signedOff bool
	// lastPingOK is when his last 2xx ping answer arrived (zero: none).
	lastPingOK time.Time
}

// rideFact is a ride's final state in PostgreSQL and the transitions its outbox announced.
type rideFact struct {
	status, driverID string
	acceptedBy       map[string]bool // drivers named by its ride.accepted events
	started          bool            // a ride.started event exists
}

// truthInput is everything judge needs; judge reads nothing else.
type truthInput struct {
	drivers   []driverTruth
	decisions []offlineDecision
	// presence is Redis's status of the stopped drivers without an offline decision after their
	// stop ("" when Redis holds nothing of him).
	presence map[string]string
	// liveness is Redis's liveness decision on the same drivers at the end ("lapsed", or "unknown"
	// with its reason, redisstore.Presence), for the examples: why nothing decided him.
	liveness map[string]string
	acks     []ack
	answers  []answer // the calls to AnswerOps endpoints
	rides    map[string]rideFact
	outages  []Outage
	ttl      time.Duration
	grace    time.Duration
	// judgedAt is when the platform's decisions were read: a driver whose deadline is later is not
	// judged.
	judgedAt time.Time
	// fleetSilent is when the replay stopped sending pings (wall; zero: not yet), pingGap the
	// longest a pinging driver goes between two sent pings (wall). From fleetSilent + ttl/2 -
	// pingGap on, every driver who was pinging may have been silent for half a TTL: the offline
	// brake may engage on the replay's own end (silentOutage).
	fleetSilent time.Time
	pingGap     time.Duration
	// selfSilent are the spans in which the replay left most of its drivers silent (watchSilence):
	// outages for the deadlines, kept apart so that Rejudge's outages do not replace them.
	selfSilent []Outage
}

// silentOutage is the outage the replay's end makes of itself: when it stops, every driver falls
// silent at once, a mass lapse to the platform (the offline brake, docs/resilience.md), which holds
// every offline decision from the moment the drivers who were pinging may have been silent for half
// a TTL, and never lets go (they never ping again). A stopped driver whose deadline falls after
// that is not judged; ok is false while the replay still pings.
func (in truthInput) silentOutage() (Outage, bool) {
	if in.fleetSilent.IsZero() {
		return Outage{}, false
	}
	return Outage{What: "replay_end", From: in.fleetSilent.Add(in.ttl/2 - in.pingGap)}, true
}

// GroundTruth is the verdict of the replay's ground truth (Summary.GroundTruth).
type GroundTruth struct {
	// FalseOfflineDrivers is how many drivers were taken offline while still pinging (must be 0).
	FalseOfflineDrivers int `json:"false_offline_drivers"`
	// MissedOfflineDrivers is how many drivers who really stopped were not taken offline by their
	// deadline (must be 0).
	MissedOfflineDrivers int `json:"missed_offline_drivers"`
	// FalseReopens is how many ride.reopened events had no cause (must be 0).
	FalseReopens int `json:"false_reopens"`
	// FalseTripAlerts is how many ride.driver.offline alerts named a driver who was pinging (must be 0).
	FalseTripAlerts int `json:"false_trip_alerts"`
	// AckedNotReflected is how many 2xx answers to accept/start/complete have no effect in the final
	// PostgreSQL state (must be 0).
	AckedNotReflected int `json:"acked_not_reflected"`
	// DriversStopped is how many drivers really stopped pinging (sign-offs excluded);
	// OfflineJudged how many of them had their deadline before the read; OfflineDetected how many of
	// those were taken offline by it.
	DriversStopped  int `json:"drivers_stopped"`
	OfflineJudged   int `json:"offline_judged"`
	OfflineDetected int `json:"offline_detected"`
	// OfflineDetectionCount, P50S and P99S: seconds (wall) from a stopped driver's last answered ping
	// to the first decision that took him offline, over the detected drivers with such a decision.
	OfflineDetectionCount int     `json:"offline_detection_count"`
	OfflineDetectionP50S  float64 `json:"offline_detection_p50_s"`
	OfflineDetectionP99S  float64 `json:"offline_detection_p99_s"`
	// OfflineDecisions counts the decisions read, by kind.
	OfflineDecisions map[string]int `json:"offline_decisions"`
	// Acks is how many 2xx answers to accept/start/complete were judged.
	Acks int `json:"acks"`
	// Outages are the outages the deadlines were judged with.
	Outages []Outage `json:"outages"`
	// AnswersDuringOutages is, per outage kind (Outage.What) and AnswerOps endpoint, how the calls
	// sent during such an outage were answered.
	AnswersDuringOutages map[string]map[string]OutageAnswers `json:"answers_during_outages"`
	// Examples holds a few ids per count (false_offline_drivers, ...).
	Examples map[string][]string `json:"examples"`
	// unjudged are the drivers who stopped (sign-offs excluded) whose deadline was not judged: an
	// outage not over, or the replay's own end (silentOutage), holds their offline decision, or
	// the deadline came after the read.
	unjudged map[string]bool
}

// Failures names the counts of g that are not 0.
func (g *GroundTruth) Failures() []string {
	var out []string
	for _, c := range []struct {
		name string
		n    int
	}{{"false_offline_drivers", g.FalseOfflineDrivers}, {"missed_offline_drivers", g.MissedOfflineDrivers},
		{"false_reopens", g.FalseReopens}, {"false_trip_alerts", g.FalseTripAlerts}, {"acked_not_reflected", g.AckedNotReflected}} {
		if c.n > 0 {
			out = append(out, fmt.Sprintf("%s = %d", c.name, c.n))
		}
	}
	return out
}

// WriteRows prints g's counts with row (a table writer's: key, format, arguments).
func (g *GroundTruth) WriteRows(row func(k, format string, args ...any)) {
	ex := func(k string) string {
		if e := g.Examples[k]; len(e) > 0 {
			return "  e.g. " + strings.Join(e, ", ")
		}
		return ""
	}
	row("false offline drivers", "%d (taken offline while pinging)%s", g.FalseOfflineDrivers, ex("false_offline_drivers"))
	row("missed offline drivers", "%d (of %d stopped, %d judged, %d detected)%s", g.MissedOfflineDrivers, g.DriversStopped, g.OfflineJudged, g.OfflineDetected, ex("missed_offline_drivers"))
	row("false reopens", "%d%s", g.FalseReopens, ex("false_reopens"))
	row("false trip alerts", "%d%s", g.FalseTripAlerts, ex("false_trip_alerts"))
	row("acked not reflected", "%d (of %d acks)%s", g.AckedNotReflected, g.Acks, ex("acked_not_reflected"))
	row("offline detection p50/p99", "%.1f / %.1f s wall (n=%d, last answered ping → first offline decision)", g.OfflineDetectionP50S, g.OfflineDetectionP99S, g.OfflineDetectionCount)
	row("offline decisions", "%v", g.OfflineDecisions)
	writeOutageAnswers(g.AnswersDuringOutages, row)
}

// pingingAt reports whether d was still pinging at t: he never stopped, or stopped after t.
func (d driverTruth) pingingAt(t time.Time) bool { return d.stopped.IsZero() || d.stopped.After(t) }

// deadline is when the platform must have taken stopped driver d offline: his last answered ping
// + ttl + grace, or, when an outage overlaps [last ping, that], the latest such outage's end + 2 ×
// ttl (an outage not over yet: never).
func deadline(d driverTruth, outages []Outage, ttl, grace time.Duration) (time.Time, bool) {
	last := d.lastPingOK
	if last.IsZero() || last.After(d.stopped) {
		last = d.stopped
	}
	dl := last.Add(ttl + grace)
	for changed := true; changed; {
		changed = false
		for _, o := range outages {
			if o.From.After(dl) || (!o.To.IsZero() && o.To.Before(last)) {
				continue
			}
			if o.To.IsZero() {
				return time.Time{}, false
			}
			if after := o.To.Add(2 * ttl); after.After(dl) {
				dl, changed = after, true
			}
		}
	}
	return dl, true
}

// judge computes the ground truth's verdict from in.
func judge(in truthInput) GroundTruth {
	g := GroundTruth{OfflineDecisions: map[string]int{}, Examples: map[string][]string{}, Outages: in.outages, Acks: len(in.acks)}
	if g.Outages == nil {
		g.Outages = []Outage{}
	}
	g.AnswersDuringOutages = answersDuringOutages(in.answers, in.outages, in.judgedAt)
	example := func(k, id string) {
		if len(g.Examples[k]) < maxExamples {
			g.Examples[k] = append(g.Examples[k], id)
		}
	}
	byID := make(map[string]driverTruth, len(in.drivers))
	for _, d := range in.drivers {
		byID[d.id] = d
	}
	decisions := append([]offlineDecision{}, in.decisions...)
	sort.SliceStable(decisions, func(i, j int) bool { return decisions[i].at.Before(decisions[j].at) })
	falseOffline := map[string]bool{}
	firstAfterStop := map[string]time.Time{}
	for _, x := range decisions {
		g.OfflineDecisions[x.kind]++
		d, ours := byID[x.driverID]
		if x.kind == "ride_reopened" && x.reason != "driver_offline" {
			// The replay's drivers and riders never cancel: any other re-opening has no cause.
			g.FalseReopens++
			example("false_reopens", x.rideID+" "+x.reason)
			continue
		}
		if !ours {
			continue
		}
		if d.pingingAt(x.at) {
			if !falseOffline[d.id] {
				falseOffline[d.id] = true
				example("false_offline_drivers", d.id+" "+x.kind+" at "+x.at.UTC().Format("15:04:05.0"))
			}
			switch x.kind {
			case "ride_reopened":
				g.FalseReopens++
				example("false_reopens", x.rideID)
			case "ride_driver_offline":
				g.FalseTripAlerts++
				example("false_trip_alerts", x.rideID)
			}
			continue
		}
		if _, seen := firstAfterStop[d.id]; !seen {
			firstAfterStop[d.id] = x.at
		}
	}
	g.FalseOfflineDrivers = len(falseOffline)
	outages := append(append([]Outage{}, in.outages...), in.selfSilent...)
	g.Outages = append(append([]Outage{}, g.Outages...), in.selfSilent...)
	if o, ok := in.silentOutage(); ok {
		outages = append(outages, o)
		g.Outages = append(g.Outages, o)
	}
	var lat []float64
	for _, d := range in.drivers {
		if d.stopped.IsZero() || d.signedOff {
			continue
		}
		g.DriversStopped++
		dl, ok := deadline(d, outages, in.ttl, in.grace)
		if !ok || dl.After(in.judgedAt) {
			if g.unjudged == nil {
				g.unjudged = map[string]bool{}
			}
			g.unjudged[d.id] = true
			continue
		}
		g.OfflineJudged++
		at, decided := firstAfterStop[d.id]
		switch {
		case decided && !at.After(dl):
			g.OfflineDetected++
			last := d.lastPingOK
			if last.IsZero() {
				last = d.stopped
			}
			lat = append(lat, at.Sub(last).Seconds())
		case !decided && (in.presence[d.id] == "" || in.presence[d.id] == "offline"):
			// Redis holds nothing of him (or offline): he cannot be offered, and no decision was
			// needed (an empty Redis has no status to change); detected, without a latency sample.
			g.OfflineDetected++
		default:
			g.MissedOfflineDrivers++
			if decided {
				example("missed_offline_drivers", fmt.Sprintf("%s late %.1fs", d.id, at.Sub(dl).Seconds()))
			} else {
				example("missed_offline_drivers", strings.TrimSpace(d.id+" "+in.presence[d.id]+" "+in.liveness[d.id]))
			}
		}
	}
	g.OfflineDetectionCount = len(lat)
	g.OfflineDetectionP50S, g.OfflineDetectionP99S = Percentile(lat, 50), Percentile(lat, 99)
	for _, a := range in.acks {
		f, ok := in.rides[a.rideID]
		reflected := ok
		if ok {
			switch a.action {
			case "accept":
				reflected = f.acceptedBy[a.driverID]
			case "start":
				reflected = f.started && (f.status == "IN_PROGRESS" || f.status == "COMPLETED") && f.driverID == a.driverID
			case "complete":
				reflected = f.status == "COMPLETED" && f.driverID == a.driverID
			}
		}
		if !reflected {
			g.AckedNotReflected++
			example("acked_not_reflected", a.action+" "+a.rideID+" "+f.status)
		}
	}
	return g
}

// readTruth reads the platform's offline decisions and the rides of ids from the PostgreSQL of
// cfg, and Redis's status of the stopped drivers PostgreSQL has no decision after their stop for.
func readTruth(ctx context.Context, cfg *config.Config, in *truthInput, ids []string) error {
	openCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	d, err := app.Open(openCtx, cfg, logging.Discard())
	cancel()
	if err != nil {
		return err
	}
	defer d.Close()
	in.judgedAt = time.Now()
	rows, err := d.DB.Pool.Query(ctx, `SELECT type, subject, data, created_at FROM outbox
		WHERE type = ANY($1) ORDER BY id`,
		[]string{events.DriverStatusChanged, events.RideReopened, events.RideDriverOffline, events.RideAccepted, events.RideStarted})
	if err != nil {
		return fmt.Errorf("read the outbox: %w", err)
	}
	type evRow struct {
		typ, subject string
		data         []byte
		at           time.Time
	}
	evs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (evRow, error) {
		var e evRow
		err := row.Scan(&e.typ, &e.subject, &e.data, &e.at)
		return e, err
	})
	if err != nil {
		return fmt.Errorf("read the outbox: %w", err)
	}
	in.rides = map[string]rideFact{}
	rrows, err := d.DB.Pool.Query(ctx, `SELECT id::text, status::text, coalesce(driver_id, '') FROM rides WHERE id::text = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("read the rides: %w", err)
	}
	facts, err := pgx.CollectRows(rrows, func(row pgx.CollectableRow) ([3]string, error) {
		var f [3]string
		err := row.Scan(&f[0], &f[1], &f[2])
		return f, err
	})
	if err != nil {
		return fmt.Errorf("read the rides: %w", err)
	}
	for _, f := range facts {
		in.rides[f[0]] = rideFact{status: f[1], driverID: f[2], acceptedBy: map[string]bool{}}
	}
	for _, e := range evs {
		switch e.typ {
		case events.DriverStatusChanged:
			var x events.DriverStatusChangedData
			if json.Unmarshal(e.data, &x) == nil && x.To == "offline" {
				in.decisions = append(in.decisions, offlineDecision{kind: "driver_offline", driverID: x.DriverID, reason: x.Reason, at: e.at})
			}
		case events.RideReopened:
			var x events.RideTransitionData
			if json.Unmarshal(e.data, &x) == nil {
				in.decisions = append(in.decisions, offlineDecision{kind: "ride_reopened", driverID: x.DriverID, rideID: e.subject, reason: x.Reason, at: e.at})
			}
		case events.RideDriverOffline:
			var x events.RideDriverOfflineData
			if json.Unmarshal(e.data, &x) == nil {
				in.decisions = append(in.decisions, offlineDecision{kind: "ride_driver_offline", driverID: x.DriverID, rideID: e.subject, at: e.at})
			}
		case events.RideAccepted:
			var x events.RideAcceptedData
			if f, ok := in.rides[e.subject]; ok && json.Unmarshal(e.data, &x) == nil {
				f.acceptedBy[x.DriverID] = true
			}
		case events.RideStarted:
			if f, ok := in.rides[e.subject]; ok {
				f.started = true
				in.rides[e.subject] = f
			}
		}
	}
	stopped := map[string]time.Time{}
	for _, dt := range in.drivers {
		if !dt.stopped.IsZero() && !dt.signedOff {
			stopped[dt.id] = dt.stopped
		}
	}
	decidedAfterStop := map[string]bool{}
	for _, x := range in.decisions {
		if at, ok := stopped[x.driverID]; ok && !x.at.Before(at) {
			decidedAfterStop[x.driverID] = true
		}
	}
	in.presence, in.liveness = map[string]string{}, map[string]string{}
	for id := range stopped {
		if decidedAfterStop[id] {
			continue
		}
		p, err := d.Redis.DriverPresence(ctx, id)
		if err != nil {
			return fmt.Errorf("read the presence of %s: %w", id, err)
		}
		in.presence[id] = string(p.Status)
		in.liveness[id] = strings.TrimSuffix("(liveness "+string(p.State)+" "+p.Reason, " ") + ")"
	}
	return nil
}

// groundTruthInto reads the platform's decisions (readTruth) and records judge's verdict in sum.
// When they cannot be read, sum.GroundTruthError says why and the error is returned.
func (s *sim) groundTruthInto(ctx context.Context, sum *Summary) error {
	cfg := s.opts.VerifyConfig
	if cfg == nil {
		var err error
		if cfg, err = config.Load(); err != nil {
			sum.GroundTruthError = err.Error()
			return err
		}
	}
	sum.truth = s.truthInput()
	in := sum.truth
	in.decisions = append([]offlineDecision{}, in.decisions...)
	if err := readTruth(ctx, cfg, &in, sum.RideIDs); err != nil {
		sum.GroundTruthError = err.Error()
		return fmt.Errorf("ground truth: %w", err)
	}
	g := judge(in)
	sum.GroundTruth = &g
	return nil
}

// truthInput is the replay's side of the ground truth: its drivers, its acks, the outages it was
// told of, the offline statuses its ping answers showed, and when its pings ended.
func (s *sim) truthInput() truthInput {
	in := truthInput{ttl: s.opts.HeartbeatTTL, grace: s.opts.OfflineGrace, acks: s.acks, answers: s.c.answers.list(),
		fleetSilent: s.pingsEnded}
	gap := s.opts.PingInterval
	if s.opts.SendRule {
		gap = max(gap, SendRuleMaxQuiet)
	}
	in.pingGap = time.Duration(float64(gap) / s.opts.Speedup)
	if s.opts.Outages != nil {
		in.outages = s.opts.Outages()
	}
	// The spans the replay itself went silent in (watchSilence); one still open at the end is
	// closed there (the replay's end is silentOutage's).
	for _, o := range s.silentSpans {
		if o.To.IsZero() {
			o.To = s.pingsEnded
		}
		in.selfSilent = append(in.selfSilent, o)
	}
	for _, d := range s.drivers {
		in.drivers = append(in.drivers, driverTruth{id: d.id, stopped: d.stoppedWall, signedOff: d.signsOff && !d.stoppedWall.IsZero(),
			lastPingOK: d.lastPingOK})
		if !d.seenOffline.IsZero() {
			in.decisions = append(in.decisions, offlineDecision{kind: "ping_answer", driverID: d.id, at: d.seenOffline})
		}
	}
	return in
}

// Rejudge reads the platform's decisions again from the PostgreSQL and Redis of cfg and replaces
// s.GroundTruth with the verdict on what the replay knew at its end, judged with outages: a run
// that kept the platform going after the replay (the chaos run's settle) judges the drivers whose
// deadline fell after the replay's end. It fails when the replay did not judge its ground truth.
func (s *Summary) Rejudge(ctx context.Context, cfg *config.Config, outages []Outage) error {
	if s.GroundTruth == nil {
		return fmt.Errorf("ground truth: the replay did not judge it (%s)", s.GroundTruthError)
	}
	in := s.truth
	in.decisions = append([]offlineDecision{}, in.decisions...)
	in.outages = outages
	if err := readTruth(ctx, cfg, &in, s.RideIDs); err != nil {
		return fmt.Errorf("ground truth: %w", err)
	}
	g := judge(in)
	s.GroundTruth = &g
	return nil
}
