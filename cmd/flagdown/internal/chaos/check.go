package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/replay"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/invariants"
	"github.com/flagdown/flagdown/shared/logging"
)

// maxExamples is how many example ride ids the summary keeps per finding.
const maxExamples = 10

// Summary is what a chaos run injected, lost and found; it is written as JSON to
// Options.SummaryPath and printed as a table.
type Summary struct {
	// Pass is true when the run completed and nothing in Failures was found: the ground truth's
	// counts, invariants during the run and at the end, dead letters, notifications, rides lost or
	// stuck, fault kinds never injected.
	Pass bool `json:"pass"`
	// Failures says why Pass is false (empty when it is true).
	Failures []string `json:"failures"`
	// Faults counts the faults injected, per Kind (every kind is present).
	Faults map[string]int `json:"faults"`
	// FaultsTotal is the sum of Faults.
	FaultsTotal int `json:"faults_total"`
	// FaultsFailed counts scheduled faults that could not be injected (e.g. no pub/sub connection
	// open at that instant), per kind.
	FaultsFailed map[string]int `json:"faults_failed"`
	// ClockOffsets lists the clock offsets the platform ran with after each PlatformClockOffset.
	ClockOffsets []string `json:"clock_offsets"`
	// EventsRepublished is how many events the EventsDupReorder faults published a second time.
	EventsRepublished int `json:"events_republished"`
	// UnexpectedExits counts exits of processes the controller did not cause (the second relay's
	// exits other than its armed fault, e.g. while the broker was down), per process.
	UnexpectedExits map[string]int `json:"unexpected_exits"`

	// ClientHTTPErrors is how many replay requests failed without an answer or with a 5xx (the
	// platform was down or restarting): the client-side cost of the downtime, not a loss.
	ClientHTTPErrors int `json:"client_http_errors"`
	// ClientHTTPErrorsByEndpoint splits ClientHTTPErrors by endpoint.
	ClientHTTPErrorsByEndpoint map[string]int `json:"client_http_errors_by_endpoint"`
	// RidesRequested is how many rides the platform accepted (order-create answered 2xx with a ride id).
	RidesRequested int `json:"rides_requested"`
	// RidesMatched and RidesCompleted are the replay's figures (see replay.Summary).
	RidesMatched   int `json:"rides_matched"`
	RidesCompleted int `json:"rides_completed"`
	// RidesLost is how many of the requested rides are not in PostgreSQL at the end (must be 0).
	RidesLost int `json:"rides_lost"`
	// RidesLostExamples are some of their ids.
	RidesLostExamples []string `json:"rides_lost_examples"`
	// RidesStuck is how many requested rides are neither terminal nor legitimately waiting, and still
	// so, unchanged, when judged again recheckAfter later (must be 0).
	RidesStuck int `json:"rides_stuck"`
	// RidesStuckExamples are some of them, "id status".
	RidesStuckExamples []string `json:"rides_stuck_examples"`
	// RidesWaiting is how many requested rides are legitimately waiting (not terminal) at the end.
	RidesWaiting int `json:"rides_waiting"`
	// RideStatuses counts the requested rides by final status in PostgreSQL.
	RideStatuses map[string]int `json:"ride_statuses"`
	// PlatformRides is how many rides PostgreSQL holds in the run's schema (the requested ones plus
	// orders the platform committed while the client did not get the answer).
	PlatformRides int `json:"platform_rides"`

	// VerifyRan is true when invariants.Check ran.
	VerifyRan bool `json:"verify_ran"`
	// Invariants maps "invariant_<name>" to its count (all must be 0).
	Invariants map[string]int `json:"invariants"`
	// InvariantExamples maps each violated invariant to example ids.
	InvariantExamples map[string][]string `json:"invariant_examples"`
	// Violations is the sum of the invariant counts.
	Violations int `json:"violations"`

	// The replay's ground truth (replay.GroundTruth; all five counts must be 0).
	FalseOfflineDrivers  int `json:"false_offline_drivers"`
	MissedOfflineDrivers int `json:"missed_offline_drivers"`
	FalseReopens         int `json:"false_reopens"`
	FalseTripAlerts      int `json:"false_trip_alerts"`
	AckedNotReflected    int `json:"acked_not_reflected"`
	// OfflineDetectionP50S and P99S: seconds (wall) from a stopped driver's last answered ping to
	// the decision that took him offline.
	OfflineDetectionP50S float64 `json:"offline_detection_p50_s"`
	OfflineDetectionP99S float64 `json:"offline_detection_p99_s"`
	// GroundTruth is the replay's whole verdict (nil when it could not be judged).
	GroundTruth *replay.GroundTruth `json:"ground_truth"`
	// ActionRetries and ActionsUnanswered are the replay's (accept/start/complete sent again; left
	// without a final answer).
	ActionRetries     int `json:"action_retries"`
	ActionsUnanswered int `json:"actions_unanswered"`

	// DuringRounds is how many invariant checks ran during the run, DuringRoundsSkipped how many
	// were skipped (an outage under way or within the grace, or the stores unreachable).
	DuringRounds        int `json:"during_rounds"`
	DuringRoundsSkipped int `json:"during_rounds_skipped"`
	// DuringInvariants maps "invariant_<name>" to the largest count a round during the run found
	// (all must be 0); DuringExamples to that round's examples.
	DuringInvariants map[string]int      `json:"during_invariants"`
	DuringExamples   map[string][]string `json:"during_examples"`
	// DeadLetters is how many events the broker's dead-letter stream holds at the end (must be 0).
	DeadLetters int `json:"dead_letters"`
	// NotifyReapplied and NotifyNotReapplied count the Redis starts after which flagdown did, or did
	// not (must be 0), apply notify-keyspace-events within notifyWithin (Redis runs without it on
	// its command line).
	NotifyReapplied    int `json:"notify_reapplied"`
	NotifyNotReapplied int `json:"notify_not_reapplied"`
	// ReconcileRepairs counts reconcile's repairs over the run, per kind (the platform's
	// flagdown_reconcile_repairs_total, summed over its restarts).
	ReconcileRepairs map[string]int `json:"reconcile_repairs"`
	// Outages are the spans Redis or the platform was away (faults), wall time.
	Outages []replay.Outage `json:"outages"`
	// HeartbeatTTLS and RedisStopS are the platform's heartbeat TTL and the SIGSTOP length, seconds.
	HeartbeatTTLS float64 `json:"heartbeat_ttl_s"`
	RedisStopS    float64 `json:"redis_stop_s"`

	// The run's settings.
	Minutes           float64 `json:"minutes"`
	Drivers           int     `json:"drivers"`
	Speedup           float64 `json:"speedup"`
	FaultIntervalS    float64 `json:"fault_interval_s"`
	Seed              uint64  `json:"seed"`
	ReconcileInterval string  `json:"reconcile_interval"`
	GraceS            float64 `json:"grace_s"`
	Schema            string  `json:"schema"`
	RedisPrefix       string  `json:"redis_prefix"`
	RedisURL          string  `json:"redis_url"`
	WorkDir           string  `json:"work_dir"`
	// SettleSeconds is how long the platform ran after the replay before the check.
	SettleSeconds float64 `json:"settle_seconds"`
	// WallSeconds is the whole run's wall time.
	WallSeconds float64 `json:"wall_seconds"`

	rideIDs []string
	inHand  map[string]bool // rides the replay's drivers held when it stopped, or that await their driver's offline decision
}

func newSummary(o Options) *Summary {
	s := &Summary{Faults: map[string]int{}, FaultsFailed: map[string]int{}, UnexpectedExits: map[string]int{},
		ClockOffsets: []string{}, ClientHTTPErrorsByEndpoint: map[string]int{}, RidesLostExamples: []string{},
		RidesStuckExamples: []string{}, RideStatuses: map[string]int{}, Invariants: map[string]int{},
		InvariantExamples: map[string][]string{}, Failures: []string{},
		DuringInvariants: map[string]int{}, DuringExamples: map[string][]string{}, ReconcileRepairs: map[string]int{},
		Outages: []replay.Outage{}, HeartbeatTTLS: o.HeartbeatTTL.Seconds(), RedisStopS: o.RedisStop.Seconds(),
		Minutes: o.Minutes, Drivers: o.Drivers, Speedup: o.Speedup, FaultIntervalS: o.FaultInterval.Seconds(),
		Seed: o.Seed, ReconcileInterval: o.ReconcileInterval.String(), GraceS: o.Grace.Seconds()}
	for _, k := range o.kinds() {
		s.Faults[string(k)] = 0
	}
	return s
}

// takeReplay records the replay's figures.
func (s *Summary) takeReplay(rs *replay.Summary) {
	s.RidesRequested, s.RidesMatched, s.RidesCompleted = rs.RidesRequested, rs.RidesMatched, rs.RidesCompleted
	for ep, n := range rs.HTTPErrors {
		s.ClientHTTPErrorsByEndpoint[ep] += n
		s.ClientHTTPErrors += n
	}
	s.rideIDs = append([]string{}, rs.RideIDs...)
	s.inHand = map[string]bool{}
	for _, id := range rs.RidesInHand {
		s.inHand[id] = true
	}
	s.ActionRetries, s.ActionsUnanswered = rs.ActionRetries, rs.ActionsUnanswered
	if g := rs.GroundTruth; g != nil {
		s.takeGroundTruth(g)
	} else {
		s.Failures = append(s.Failures, "ground truth not judged: "+rs.GroundTruthError)
	}
}

// takeGroundTruth records the replay's ground truth.
func (s *Summary) takeGroundTruth(g *replay.GroundTruth) {
	s.GroundTruth = g
	s.FalseOfflineDrivers, s.MissedOfflineDrivers, s.FalseReopens = g.FalseOfflineDrivers, g.MissedOfflineDrivers, g.FalseReopens
	s.FalseTripAlerts, s.AckedNotReflected = g.FalseTripAlerts, g.AckedNotReflected
	s.OfflineDetectionP50S, s.OfflineDetectionP99S = g.OfflineDetectionP50S, g.OfflineDetectionP99S
}

// check runs the end-of-run checks against the run's PostgreSQL schema and Redis prefix.
func (r *run) check(ctx context.Context) error {
	for _, k := range r.opts.kinds() {
		r.sum.FaultsTotal += r.sum.Faults[string(k)]
		if r.sum.Faults[string(k)] == 0 {
			r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("fault %s was never injected", k))
		}
	}
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	d, err := app.Open(octx, r.cfg, logging.Discard())
	cancel()
	if err != nil {
		return fmt.Errorf("chaos: open the stores for the check: %w", err)
	}
	defer d.Close()
	if r.replaySum != nil && r.replaySum.GroundTruth != nil {
		// Judged again after the settle: the drivers whose deadline fell after the replay's end.
		if err := r.replaySum.Rejudge(ctx, r.cfg, r.outageList()); err != nil {
			r.sum.Failures = append(r.sum.Failures, err.Error())
		} else {
			r.sum.takeGroundTruth(r.replaySum.GroundTruth)
		}
		// A ride whose driver dropped offline before starting it waits, ACCEPTED, for the platform
		// to take him offline; while his deadline is not judged (the replay's end engaged the
		// offline brake before it), it waits for a reason.
		for _, id := range r.replaySum.RidesAwaitingOffline() {
			r.sum.inHand[id] = true
		}
	}
	rep, err := invariants.CheckDeployment(ctx, r.checkConfig(), d.DB, d.Redis, r.opts.Grace)
	if err != nil {
		return fmt.Errorf("chaos: invariants: %w", err)
	}
	if len(rep.NotChecked) > 0 {
		r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("invariants not checked: %v (%s)", rep.NotChecked, rep.NotCheckedWhy))
	}
	r.sum.VerifyRan, r.sum.Violations = true, rep.Violations()
	for _, res := range rep.Results {
		r.sum.Invariants[res.Name.Key()] = res.Count
		if res.Count > 0 {
			r.sum.InvariantExamples[string(res.Name)] = res.Examples
			r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("%s = %d", res.Name.Key(), res.Count))
		}
	}
	if err := d.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM rides`).Scan(&r.sum.PlatformRides); err != nil {
		return fmt.Errorf("chaos: count rides: %w", err)
	}

	first, err := r.classify(ctx, d, r.sum.rideIDs)
	if err != nil {
		return err
	}
	// A ride can look idle for an instant (its retry timer fired, the match it triggers has not
	// committed yet): a suspect is stuck only if it is still idle, unchanged, a few seconds later.
	var suspects []string
	for id, v := range first {
		if v.stuck {
			suspects = append(suspects, id)
		}
	}
	second := map[string]rideVerdict{}
	if len(suspects) > 0 {
		r.logf("%d rides look stuck; checking them again in %s", len(suspects), recheckAfter)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(recheckAfter):
		}
		if second, err = r.classify(ctx, d, suspects); err != nil {
			return err
		}
	}
	ids := append([]string{}, r.sum.rideIDs...)
	sort.Strings(ids)
	for _, id := range ids {
		v, ok := first[id]
		if !ok {
			r.sum.RidesLost++
			if len(r.sum.RidesLostExamples) < maxExamples {
				r.sum.RidesLostExamples = append(r.sum.RidesLostExamples, id)
			}
			continue
		}
		r.sum.RideStatuses[v.status]++
		if v.terminal {
			continue
		}
		if again, ok := second[id]; v.stuck && ok && again.stuck && again.updatedAt.Equal(v.updatedAt) {
			r.sum.RidesStuck++
			if len(r.sum.RidesStuckExamples) < maxExamples {
				r.sum.RidesStuckExamples = append(r.sum.RidesStuckExamples, id+" "+v.status)
			}
			continue
		}
		r.sum.RidesWaiting++
	}
	if r.sum.RidesRequested == 0 {
		r.sum.Failures = append(r.sum.Failures, "the replay requested no ride")
	}
	if r.sum.RidesLost > 0 {
		r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("rides lost = %d", r.sum.RidesLost))
	}
	if r.sum.RidesStuck > 0 {
		r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("rides stuck = %d", r.sum.RidesStuck))
	}
	r.during(func(s *Summary) {
		for k, n := range s.DuringInvariants {
			if n > 0 {
				s.Failures = append(s.Failures, fmt.Sprintf("during the run %s = %d", k, n))
			}
		}
	})
	if r.sum.DuringRounds == 0 {
		r.sum.Failures = append(r.sum.Failures, "no invariant check ran during the run")
	}
	if g := r.sum.GroundTruth; g != nil {
		r.sum.Failures = append(r.sum.Failures, g.Failures()...)
	}
	if n, err := r.deadLetters(ctx); err != nil {
		r.sum.Failures = append(r.sum.Failures, "dead letters not counted: "+err.Error())
	} else if r.sum.DeadLetters = n; n > 0 {
		r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("dead letters = %d", n))
	}
	if r.sum.NotifyNotReapplied > 0 {
		r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("notify-keyspace-events not re-applied after %d Redis starts", r.sum.NotifyNotReapplied))
	}
	r.scrapeRepairs(ctx)
	r.sum.ReconcileRepairs = r.repairs()
	r.sum.Outages = r.outageList()
	return nil
}

// recheckAfter is how long a ride that looks stuck is given before it is judged again.
const recheckAfter = 5 * time.Second

// rideVerdict is what classify found of one ride.
type rideVerdict struct {
	status    string
	updatedAt time.Time
	terminal  bool // COMPLETED, CANCELLED or UNMATCHED
	stuck     bool // neither terminal nor legitimately waiting
}

// classify reads the rides ids from PostgreSQL (and the retry timers of idle REQUESTED ones from
// Redis) and judges each: terminal, legitimately waiting (REQUESTED with a PENDING offer, a change
// within the grace, or a retry timer armed or fired within the grace; ACCEPTED/IN_PROGRESS with its
// driver's assignment row naming it in that status), or stuck. Rides not in PostgreSQL are absent
// from the result.
func (r *run) classify(ctx context.Context, d *app.Deps, ids []string) (map[string]rideVerdict, error) {
	type rideRow struct {
		id, status            string
		updatedAt             time.Time
		pending, recent, held bool
	}
	rows, err := d.DB.Pool.Query(ctx, `SELECT r.id::text, r.status::text, r.updated_at,
		  EXISTS (SELECT 1 FROM offers o WHERE o.ride_id = r.id AND o.status = 'PENDING'),
		  r.updated_at > now() - $2 * interval '1 millisecond',
		  EXISTS (SELECT 1 FROM driver_assignments a WHERE a.driver_id = r.driver_id AND a.ride_id = r.id
		          AND a.ride_status = r.status::text)
		FROM rides r WHERE r.id::text = ANY($1)`, ids, r.opts.Grace.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("chaos: read rides: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (rideRow, error) {
		var x rideRow
		err := row.Scan(&x.id, &x.status, &x.updatedAt, &x.pending, &x.recent, &x.held)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: read rides: %w", err)
	}
	var idle []string
	for _, x := range found {
		if x.status == "REQUESTED" && !x.pending && !x.recent {
			idle = append(idle, x.id)
		}
	}
	armed := map[string]bool{}
	if len(idle) > 0 {
		now, timers, err := d.Redis.RetryTimers(ctx, idle)
		if err != nil {
			return nil, fmt.Errorf("chaos: read retry timers: %w", err)
		}
		for i, t := range timers {
			armed[idle[i]] = t.Armed || (!t.Deadline.IsZero() && t.Deadline.After(now.Add(-r.opts.Grace)))
		}
	}
	out := make(map[string]rideVerdict, len(found))
	for _, x := range found {
		v := rideVerdict{status: x.status, updatedAt: x.updatedAt}
		switch x.status {
		case "COMPLETED", "CANCELLED", "UNMATCHED":
			v.terminal = true
		case "REQUESTED":
			v.stuck = !(x.pending || x.recent || armed[x.id])
		case "ACCEPTED", "IN_PROGRESS":
			// Moving, or waiting for a reason: a replay driver holds it (he stopped with the
			// replay), or it changed within the grace. Its assignment row alone is no reason: a
			// ride whose driver stopped must be re-opened, one whose driver drives it must move.
			v.stuck = !(x.held && (r.sum.inHand[x.id] || x.recent))
		default:
			v.stuck = true
		}
		out[x.id] = v
	}
	return out, nil
}

// dropSchema removes the run's PostgreSQL schema (after a passing run).
func (r *run) dropSchema() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.opts.DatabaseURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{r.sum.Schema}.Sanitize()+" CASCADE")
}

// WriteJSON writes s as indented JSON to path.
func (s *Summary) WriteJSON(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable prints s as an aligned table: faults per kind, client errors, rides, invariants and
// the verdict.
func (s *Summary) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	fmt.Fprintln(tw, "\nchaos run\t")
	for _, k := range Kinds {
		if _, in := s.Faults[string(k)]; !in {
			continue
		}
		extra := ""
		if n := s.FaultsFailed[string(k)]; n > 0 {
			extra = fmt.Sprintf("  (%d not injectable)", n)
		}
		if k == EventsDupReorder {
			extra += fmt.Sprintf("  (%d events)", s.EventsRepublished)
		}
		if k == PlatformClockOffset && len(s.ClockOffsets) > 0 {
			extra += "  (" + strings.Join(s.ClockOffsets, ", ") + ")"
		}
		row("fault "+string(k), "%d%s", s.Faults[string(k)], extra)
	}
	row("faults total", "%d", s.FaultsTotal)
	if len(s.UnexpectedExits) > 0 {
		row("other process exits", "%v", s.UnexpectedExits)
	}
	row("client HTTP errors", "%d %v", s.ClientHTTPErrors, s.ClientHTTPErrorsByEndpoint)
	row("rides requested / matched / completed", "%d / %d / %d", s.RidesRequested, s.RidesMatched, s.RidesCompleted)
	row("rides in PostgreSQL", "%d", s.PlatformRides)
	row("ride statuses", "%v", s.RideStatuses)
	row("rides waiting (legitimately)", "%d", s.RidesWaiting)
	row("rides lost", "%d %s", s.RidesLost, strings.Join(s.RidesLostExamples, ", "))
	row("rides stuck", "%d %s", s.RidesStuck, strings.Join(s.RidesStuckExamples, ", "))
	if s.VerifyRan {
		names := make([]string, 0, len(s.Invariants))
		for k := range s.Invariants {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			ex := ""
			if e := s.InvariantExamples[strings.TrimPrefix(k, "invariant_")]; len(e) > 0 {
				ex = "  e.g. " + strings.Join(e, ", ")
			}
			row(k, "%d%s", s.Invariants[k], ex)
		}
	} else {
		row("invariants", "NOT CHECKED")
	}
	if g := s.GroundTruth; g != nil {
		g.WriteRows(row)
	} else {
		row("ground truth", "NOT JUDGED")
	}
	row("driver actions", "%d retried, %d unanswered at the end", s.ActionRetries, s.ActionsUnanswered)
	names := make([]string, 0, len(s.DuringInvariants))
	for k := range s.DuringInvariants {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ex := ""
		if e := s.DuringExamples[strings.TrimPrefix(k, "invariant_")]; s.DuringInvariants[k] > 0 && len(e) > 0 {
			ex = "  e.g. " + strings.Join(e, ", ")
		}
		row("during the run: "+k, "%d (largest of %d rounds)%s", s.DuringInvariants[k], s.DuringRounds, ex)
	}
	row("during-run rounds", "%d checked, %d skipped (outage or grace after one)", s.DuringRounds, s.DuringRoundsSkipped)
	row("dead letters", "%d", s.DeadLetters)
	row("notify-keyspace-events", "re-applied after %d Redis starts, NOT after %d", s.NotifyReapplied, s.NotifyNotReapplied)
	row("reconcile repairs", "%v", s.ReconcileRepairs)
	row("heartbeat TTL / Redis stop", "%.0f s / %.0f s", s.HeartbeatTTLS, s.RedisStopS)
	row("settle / wall time", "%.0f s / %.0f s", s.SettleSeconds, s.WallSeconds)
	verdict := "PASS"
	if !s.Pass {
		verdict = "FAIL: " + strings.Join(s.Failures, "; ")
	}
	row("verdict", "%s", verdict)
	tw.Flush()
}
