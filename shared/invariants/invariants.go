// Package invariants checks that a deployment's state holds flagdown's guarantees, reading
// PostgreSQL (the truth) and Redis (its projection) and changing nothing: the rules of `flagdown
// verify`, which the replay also runs at its end. All lists every invariant and what it counts; it
// is the one place their meaning is written down (the command help and docs/operations.md point here).
//
// Anything that is only eventually true (Redis following a commit, a timeout being acted on, the
// relay publishing) is judged only after grace: a violation is something that stayed wrong longer
// than the platform's own paths take to make it right. Ages are measured with PostgreSQL's clock
// (and Redis's for Redis deadlines), never the host's. Whatever compares the two stores is read
// PostgreSQL, then Redis, then PostgreSQL again for the suspects: a change committed between the two
// reads is not taken for a divergence.
package invariants

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Name identifies an invariant. Names are snake_case and stable: they are the JSON keys of
// `flagdown verify --json` and, as "invariant_<name>", of the replay summary.
type Name string

// The invariants, in report order (see All for what each counts).
const (
	DriverRideMismatch      Name = "driver_ride_mismatch"
	AvailableWhileOnRide    Name = "available_while_on_ride"
	DriverTwoActiveRides    Name = "driver_two_active_rides"
	AssignmentRowMismatch   Name = "assignment_row_mismatch"
	RideTwoPendingOffers    Name = "ride_two_pending_offers"
	DriverTwoPendingOffers  Name = "driver_two_pending_offers"
	PendingOfferWhileOnRide Name = "pending_offer_while_on_ride"
	PendingOfferOverdue     Name = "pending_offer_overdue"
	RequestedRideIdle       Name = "requested_ride_idle"
	OutboxBacklog           Name = "outbox_backlog"
	RidePositionWrongDriver Name = "ride_position_wrong_driver"
	FenceAhead              Name = "fence_ahead"
	FenceBehind             Name = "fence_behind"
	OfferLockNotPending     Name = "offer_lock_not_pending"
	PendingOfferNoLock      Name = "pending_offer_no_lock"
	PickupOverdue           Name = "pickup_overdue"
	TripOverdueNoAlert      Name = "trip_overdue_no_alert"
	DeadLetteredEvents      Name = "dead_lettered_events"
	ConsumerLag             Name = "consumer_lag"
)

// Key is the invariant's key in the replay summary: "invariant_<name>".
func (n Name) Key() string { return "invariant_" + string(n) }

// Invariant describes one rule.
type Invariant struct {
	Name Name
	// Counts says what one unit of the count is, which is also the kind of the example ids.
	Counts string
	// Meaning says what breaks the rule.
	Meaning string
}

// All lists every invariant in report order. Each count must be 0 in a healthy deployment.
var All = []Invariant{
	{DriverRideMismatch, "drivers",
		"Redis's ride of the driver (his hash) is not his active ride in PostgreSQL (driver_assignments): Redis shows him on a ride and PostgreSQL has him free, or the reverse, or another ride; only once his assignment is older than grace"},
	{AvailableWhileOnRide, "drivers",
		"PostgreSQL has the driver on a ride (for longer than grace) and he is in Redis's available GEO set, where match could offer him another ride"},
	{DriverTwoActiveRides, "drivers",
		"the driver has two or more ACCEPTED/IN_PROGRESS rides in PostgreSQL (the index rides_one_active_per_driver forbids it)"},
	{AssignmentRowMismatch, "drivers",
		"the driver's driver_assignments row disagrees with rides: it names a ride that is not active with him in that status, or he has an active ride his row does not name"},
	{RideTwoPendingOffers, "rides",
		"the ride has two or more PENDING offers (the index offers_one_pending_per_ride forbids it)"},
	{DriverTwoPendingOffers, "drivers",
		"the driver holds two or more PENDING offers in PostgreSQL: he can answer only one, and the other ride waits for its window to pass"},
	{PendingOfferWhileOnRide, "offers",
		"a PENDING offer to a driver who has an ACCEPTED/IN_PROGRESS ride in PostgreSQL: he was offered a ride while on another"},
	{PendingOfferOverdue, "offers",
		"a PENDING offer whose window closed more than grace ago: its timeout was neither acted on nor repaired"},
	{RequestedRideIdle, "rides",
		"a REQUESTED ride nothing touched for grace with no PENDING offer, no retry timer (none armed in Redis, and none that fired less than grace ago) and not waiting in an armed batch: only reconcile can still move it"},
	{OutboxBacklog, "outbox events",
		"an outbox row still unpublished more than grace after it was written: its event has not reached the broker"},
	{RidePositionWrongDriver, "rides",
		"an ACCEPTED/IN_PROGRESS ride whose live position in Redis names a driver other than the ride's (an empty driver is fine); only rides whose assignment is older than grace"},
	{FenceAhead, "drivers (and the token sequence)",
		"Redis applied a fencing token newer than PostgreSQL's: a driver's fence (P fence:{id}) is past his driver_assignments token, or Redis's highest (P fence:max) is past the last value of the sequence assignment_token (example id assignment_token). PostgreSQL moved backwards (failover to an asynchronous replica, point-in-time restore) and reconcile has not taken its word yet; among the drivers PostgreSQL or Redis has on a ride"},
	{FenceBehind, "drivers",
		"a driver's fence in Redis is older than his driver_assignments token, which changed more than grace ago: the last change of his assignment never reached Redis; among the drivers PostgreSQL or Redis has on a ride"},
	{OfferLockNotPending, "offer locks",
		"a driver's offer lock in Redis holds an offer that is not PENDING in PostgreSQL: answered, expired or cancelled more than grace ago (the lock was not released, and keeps him from every other offer), or no such offer and its window closed more than grace ago"},
	{PendingOfferNoLock, "offers",
		"a PENDING offer created more than grace ago, whose window closes more than grace from now, whose driver's offer lock in Redis is missing or holds another offer: nothing keeps a second offer from him in Redis"},
	{PickupOverdue, "rides",
		"a ride still ACCEPTED more than the pickup deadline (FLAGDOWN_PICKUP_DEADLINE) plus grace after its accept: it should have been re-opened (ride.reopened, reason pickup_overdue); none when the deadline is off"},
	{TripOverdueNoAlert, "rides",
		"a ride IN_PROGRESS more than the trip ceiling (FLAGDOWN_TRIP_CEILING) plus grace after its start with no ride.overdue alert in the outbox; none when the ceiling is off"},
	{DeadLetteredEvents, "events (examples: their subjects)",
		"an event in the broker's dead-letter stream (<stream>_DLQ): a consumer refused it or failed on it past its last retry, and its effect never happened; checked only when the broker is reachable"},
	{ConsumerLag, "consumers",
		"a durable consumer of the events stream with more than Options.MaxConsumerLag events not yet delivered to it (JetStream's pending count): its function is down or falls behind; checked only when the broker is reachable"},
}

// brokerInvariants are the invariants Check can judge only with a broker (Options.Broker).
var brokerInvariants = []Name{DeadLetteredEvents, ConsumerLag}

// DefaultMaxConsumerLag is the consumer lag (events not yet delivered) above which ConsumerLag
// counts a consumer when Options.MaxConsumerLag is 0.
const DefaultMaxConsumerLag = 1000

// Options say how Check judges.
type Options struct {
	// Grace is how long something only eventually true may stay wrong before it counts (≥ 0).
	Grace time.Duration
	// PickupDeadline is FLAGDOWN_PICKUP_DEADLINE (0: off), TripCeiling FLAGDOWN_TRIP_CEILING (0:
	// off), as the platform runs with them.
	PickupDeadline, TripCeiling time.Duration
	// Broker, when not nil, is the deployment's JetStream broker: DeadLetteredEvents and
	// ConsumerLag are judged on its streams (read only). When nil they are reported not checked.
	Broker *broker.Broker
	// MaxConsumerLag is the most events a consumer may have not yet delivered (0:
	// DefaultMaxConsumerLag).
	MaxConsumerLag uint64
}

// DefaultPickupDeadline and DefaultTripCeiling are the defaults of FLAGDOWN_PICKUP_DEADLINE and
// FLAGDOWN_TRIP_CEILING (shared/config), which Check judges with.
const (
	DefaultPickupDeadline = 30 * time.Minute
	DefaultTripCeiling    = 3 * time.Hour
)

// MaxExamples is how many example ids a Result keeps.
const MaxExamples = 10

// Result is one invariant's finding.
type Result struct {
	Name Name `json:"name"`
	// Count is how many drivers, rides, offers or events break the rule (Invariant.Counts).
	Count int `json:"count"`
	// Examples are at most MaxExamples of their ids, sorted; empty when Count is 0.
	Examples []string `json:"examples"`
}

// Report is what Check found: one Result per invariant, in the order of All.
type Report struct {
	// Grace is the grace Check judged with.
	Grace time.Duration
	// Results has one entry per invariant of All, in that order.
	Results []Result
	// NotChecked names the invariants that could not be judged (count 0), with NotCheckedWhy.
	NotChecked []Name
	// NotCheckedWhy says why they were not (e.g. no broker reachable).
	NotCheckedWhy string
}

func newReport(grace time.Duration) Report {
	r := Report{Grace: grace, Results: make([]Result, len(All))}
	for i, inv := range All {
		r.Results[i] = Result{Name: inv.Name, Examples: []string{}}
	}
	return r
}

func (r Report) result(n Name) *Result {
	for i := range r.Results {
		if r.Results[i].Name == n {
			return &r.Results[i]
		}
	}
	return nil
}

// set records invariant n's finding (Results shares its backing array, so a value receiver
// writes into the caller's report).
func (r Report) set(n Name, count int, examples []string) {
	res := r.result(n)
	res.Count = count
	if len(examples) > MaxExamples {
		examples = examples[:MaxExamples]
	}
	res.Examples = append([]string{}, examples...)
}

// Count returns invariant n's count (0 for a name not in the report).
func (r Report) Count(n Name) int {
	if res := r.result(n); res != nil {
		return res.Count
	}
	return 0
}

// Examples returns invariant n's example ids.
func (r Report) Examples(n Name) []string {
	if res := r.result(n); res != nil {
		return res.Examples
	}
	return nil
}

// Violations is the sum of every count; 0 means every invariant holds.
func (r Report) Violations() int {
	n := 0
	for _, res := range r.Results {
		n += res.Count
	}
	return n
}

// Counts maps each invariant's summary key ("invariant_<name>") to its count.
func (r Report) Counts() map[string]int {
	m := make(map[string]int, len(r.Results))
	for _, res := range r.Results {
		m[res.Name.Key()] = res.Count
	}
	return m
}

// MarshalJSON writes {"grace_s": ..., "violations": ..., "invariant_<name>": count, ...,
// "examples": {"<name>": [ids], ...}}; examples lists only violated invariants.
func (r Report) MarshalJSON() ([]byte, error) {
	m := map[string]any{"grace_s": r.Grace.Seconds(), "violations": r.Violations()}
	ex := map[string][]string{}
	for _, res := range r.Results {
		m[res.Name.Key()] = res.Count
		if res.Count > 0 {
			ex[string(res.Name)] = res.Examples
		}
	}
	m["examples"] = ex
	if len(r.NotChecked) > 0 {
		m["not_checked"], m["not_checked_why"] = r.NotChecked, r.NotCheckedWhy
	}
	return json.Marshal(m)
}

// Table prints the report as an aligned table (invariant, count, examples) followed by a verdict
// line, and returns the first write error.
func (r Report) Table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "invariant\tcount\texamples")
	for _, res := range r.Results {
		if slices.Contains(r.NotChecked, res.Name) {
			fmt.Fprintf(tw, "%s\t-\tnot checked: %s\n", res.Name, r.NotCheckedWhy)
			continue
		}
		ex := strings.Join(res.Examples, ", ")
		if res.Count > len(res.Examples) && len(res.Examples) > 0 {
			ex += fmt.Sprintf(", … (%d more)", res.Count-len(res.Examples))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", res.Name, res.Count, ex)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	checked := len(r.Results) - len(r.NotChecked)
	verdict := fmt.Sprintf("all %d invariants hold (grace %s)\n", checked, r.Grace)
	if len(r.NotChecked) > 0 {
		verdict = fmt.Sprintf("all %d invariants checked hold, %d not checked (grace %s)\n", checked, len(r.NotChecked), r.Grace)
	}
	if n := r.Violations(); n > 0 {
		verdict = fmt.Sprintf("%d violations (grace %s)\n", n, r.Grace)
	}
	_, err := io.WriteString(w, verdict)
	return err
}

// Check is CheckWith with grace and the default pickup deadline and trip ceiling.
func Check(ctx context.Context, db *pgstore.DB, rs *redisstore.Store, grace time.Duration) (Report, error) {
	return CheckWith(ctx, db, rs, Options{Grace: grace, PickupDeadline: DefaultPickupDeadline, TripCeiling: DefaultTripCeiling})
}

// CheckWith reads PostgreSQL (db) and Redis (rs) and returns how many drivers, rides, offers and
// events break each invariant of All, judging anything eventual with opt.Grace (a negative one is
// 0) and the ride timeouts with opt's. It writes nothing. An error (CodeUnavailable when a store
// cannot be reached, CodeInternal otherwise) means the check did not complete; the report is then
// the zero Report.
func CheckWith(ctx context.Context, db *pgstore.DB, rs *redisstore.Store, opt Options) (Report, error) {
	grace := max(opt.Grace, 0)
	rep := newReport(grace)
	if err := checkAssignments(ctx, db, rs, grace, rep); err != nil {
		return Report{}, fmt.Errorf("invariants: assignments: %w", err)
	}
	if err := checkSequence(ctx, db, rs, rep); err != nil {
		return Report{}, fmt.Errorf("invariants: %s: %w", FenceAhead, err)
	}
	q := db.Pool
	for _, c := range []struct {
		name Name
		run  func() (pgstore.Violations, error)
	}{
		{DriverTwoActiveRides, func() (pgstore.Violations, error) { return pgstore.DriversWithTwoActiveRides(ctx, q, MaxExamples) }},
		{AssignmentRowMismatch, func() (pgstore.Violations, error) { return pgstore.AssignmentRowMismatches(ctx, q, MaxExamples) }},
		{RideTwoPendingOffers, func() (pgstore.Violations, error) { return pgstore.RidesWithTwoPendingOffers(ctx, q, MaxExamples) }},
		{DriverTwoPendingOffers, func() (pgstore.Violations, error) { return pgstore.DriversWithTwoPendingOffers(ctx, q, MaxExamples) }},
		{PendingOfferWhileOnRide, func() (pgstore.Violations, error) { return pgstore.PendingOffersWhileOnRide(ctx, q, MaxExamples) }},
		{PendingOfferOverdue, func() (pgstore.Violations, error) { return pgstore.OverduePendingOffers(ctx, q, grace, MaxExamples) }},
		{OutboxBacklog, func() (pgstore.Violations, error) { return pgstore.OutboxBacklog(ctx, q, grace, MaxExamples) }},
		{PickupOverdue, func() (pgstore.Violations, error) {
			return pgstore.AcceptedPastPickupDeadline(ctx, q, opt.PickupDeadline, grace, MaxExamples)
		}},
	} {
		v, err := c.run()
		if err != nil {
			return Report{}, fmt.Errorf("invariants: %s: %w", c.name, err)
		}
		rep.set(c.name, v.Count, v.IDs)
	}
	if err := checkIdleRides(ctx, db, rs, grace, rep); err != nil {
		return Report{}, fmt.Errorf("invariants: %s: %w", RequestedRideIdle, err)
	}
	if err := checkRidePositions(ctx, db, rs, grace, rep); err != nil {
		return Report{}, fmt.Errorf("invariants: %s: %w", RidePositionWrongDriver, err)
	}
	if err := checkOfferLocks(ctx, db, rs, grace, rep); err != nil {
		return Report{}, fmt.Errorf("invariants: %s: %w", OfferLockNotPending, err)
	}
	if err := checkPendingLocks(ctx, db, rs, grace, rep); err != nil {
		return Report{}, fmt.Errorf("invariants: %s: %w", PendingOfferNoLock, err)
	}
	if err := checkTripAlerts(ctx, db, opt.TripCeiling, grace, rep); err != nil {
		return Report{}, fmt.Errorf("invariants: %s: %w", TripOverdueNoAlert, err)
	}
	if opt.Broker == nil {
		rep.NotChecked, rep.NotCheckedWhy = append([]Name{}, brokerInvariants...), "no broker reachable"
		return rep, nil
	}
	if err := checkBroker(ctx, opt.Broker, opt.MaxConsumerLag, rep); err != nil {
		return Report{}, fmt.Errorf("invariants: broker: %w", err)
	}
	return rep, nil
}

// checkBroker fills DeadLetteredEvents (the dead-letter stream's message count, its subjects as
// examples) and ConsumerLag (the events stream's consumers with more than maxLag pending).
func checkBroker(ctx context.Context, b *broker.Broker, maxLag uint64, rep Report) error {
	if maxLag == 0 {
		maxLag = DefaultMaxConsumerLag
	}
	js := b.JetStream()
	dlq, err := js.Stream(ctx, b.DLQStream())
	if err != nil {
		return dispatch.Unavailable("nats", err)
	}
	info, err := dlq.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return dispatch.Unavailable("nats", err)
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		subjects = append(subjects, subj)
	}
	sort.Strings(subjects)
	rep.set(DeadLetteredEvents, int(info.State.Msgs), subjects)

	events, err := js.Stream(ctx, b.Stream())
	if err != nil {
		return dispatch.Unavailable("nats", err)
	}
	var lagging []string
	list := events.ListConsumers(ctx)
	for c := range list.Info() {
		if c.NumPending > maxLag {
			lagging = append(lagging, c.Name)
		}
	}
	if err := list.Err(); err != nil {
		return dispatch.Unavailable("nats", err)
	}
	sort.Strings(lagging)
	rep.set(ConsumerLag, len(lagging), lagging)
	return nil
}

// checkOfferLocks fills OfferLockNotPending: every offer lock (Redis), then the offers they hold
// (PostgreSQL, read after: an offer committed meanwhile is PENDING there).
func checkOfferLocks(ctx context.Context, db *pgstore.DB, rs *redisstore.Store, grace time.Duration, rep Report) error {
	locks, err := rs.OfferLocks(ctx)
	if err != nil || len(locks) == 0 {
		return err
	}
	ids, exp := make([]string, len(locks)), make([]*time.Time, len(locks))
	for i, l := range locks {
		ids[i] = l.Offer.OfferID
		if !l.Offer.ExpiresAt.IsZero() {
			exp[i] = &locks[i].Offer.ExpiresAt
		}
	}
	v, err := pgstore.LockedOffersNotPending(ctx, db.Pool, ids, exp, grace, MaxExamples)
	if err != nil {
		return err
	}
	rep.set(OfferLockNotPending, v.Count, v.IDs)
	return nil
}

// checkPendingLocks fills PendingOfferNoLock: open PENDING offers (PostgreSQL), their drivers'
// locks (Redis), then the suspects read again (still PENDING and open).
func checkPendingLocks(ctx context.Context, db *pgstore.DB, rs *redisstore.Store, grace time.Duration, rep Report) error {
	open, err := pgstore.OpenPendingOffers(ctx, db.Pool, grace, nil)
	if err != nil || len(open) == 0 {
		return err
	}
	drivers := make([]string, len(open))
	for i, o := range open {
		drivers[i] = o.DriverID
	}
	held, err := rs.OfferLockHolders(ctx, drivers)
	if err != nil {
		return err
	}
	var suspects []string
	for i, o := range open {
		if held[i] != o.OfferID {
			suspects = append(suspects, o.OfferID)
		}
	}
	if len(suspects) == 0 {
		return nil
	}
	still, err := pgstore.OpenPendingOffers(ctx, db.Pool, grace, suspects)
	if err != nil {
		return err
	}
	ids := make([]string, len(still))
	for i, o := range still {
		ids[i] = o.OfferID
	}
	rep.set(PendingOfferNoLock, len(ids), ids)
	return nil
}

// checkTripAlerts fills TripOverdueNoAlert: IN_PROGRESS rides past ceiling + grace, then which of
// them have their ride.overdue outbox row (lifecycle.TripOverdueEventID).
func checkTripAlerts(ctx context.Context, db *pgstore.DB, ceiling, grace time.Duration, rep Report) error {
	if ceiling <= 0 {
		return nil
	}
	due, err := pgstore.OverdueRides(ctx, db.Pool, dispatch.RideInProgress, ceiling+grace, nil, math.MaxInt32)
	if err != nil || len(due) == 0 {
		return err
	}
	eventIDs := make([]string, len(due))
	for i, id := range due {
		eventIDs[i] = lifecycle.TripOverdueEventID(id)
	}
	found, err := pgstore.OutboxEventsExist(ctx, db.Pool, eventIDs)
	if err != nil {
		return err
	}
	var missing []string
	for i, id := range due {
		if !found[eventIDs[i]] {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	rep.set(TripOverdueNoAlert, len(missing), missing)
	return nil
}

// checkAssignments fills DriverRideMismatch, AvailableWhileOnRide, FenceAhead (its drivers) and
// FenceBehind from lifecycle.CheckAssignments (PostgreSQL, then Redis), keeping only the suspects
// whose PostgreSQL assignment is unchanged when read again afterwards (same token, or still no
// row). All but FenceAhead count only settled drivers (unchanged for grace): Redis is never
// legitimately ahead.
func checkAssignments(ctx context.Context, db *pgstore.DB, rs *redisstore.Store, grace time.Duration, rep Report) error {
	checks, err := lifecycle.CheckAssignments(ctx, db.Pool, rs)
	if err != nil {
		return err
	}
	var suspects []lifecycle.AssignmentCheck
	var ids []string
	for _, c := range checks {
		settled := c.Settled(grace)
		if (settled && (c.Redis.RideID != c.PG.RideID || (c.PG.RideID != "" && c.Redis.InAvailable) || c.Behind())) || c.Ahead() {
			suspects, ids = append(suspects, c), append(ids, c.DriverID)
		}
	}
	if len(suspects) == 0 {
		return nil
	}
	fresh, err := pgstore.AssignmentsOf(ctx, db.Pool, ids)
	if err != nil {
		return err
	}
	var mismatch, available, ahead, behind []string
	for _, c := range suspects { // sorted by driver id, as CheckAssignments returns them
		row, ok := fresh[c.DriverID]
		if ok != c.HasRow || (ok && row.Epoch != c.PG.Epoch) {
			continue // PostgreSQL moved while Redis was read: judged at the next check
		}
		if c.Ahead() {
			ahead = append(ahead, c.DriverID)
		}
		if !c.Settled(grace) {
			continue
		}
		if c.Redis.RideID != c.PG.RideID {
			mismatch = append(mismatch, c.DriverID)
		}
		if c.PG.RideID != "" && c.Redis.InAvailable {
			available = append(available, c.DriverID)
		}
		if c.Behind() {
			behind = append(behind, c.DriverID)
		}
	}
	rep.set(DriverRideMismatch, len(mismatch), mismatch)
	rep.set(AvailableWhileOnRide, len(available), available)
	rep.set(FenceAhead, len(ahead), ahead)
	rep.set(FenceBehind, len(behind), behind)
	return nil
}

// checkSequence adds to FenceAhead the token sequence when Redis's highest token is past
// PostgreSQL's last token read afterwards (a token committed and applied in between is then in
// PostgreSQL's read too).
func checkSequence(ctx context.Context, db *pgstore.DB, rs *redisstore.Store, rep Report) error {
	top, err := rs.MaxFence(ctx)
	if err != nil || top == 0 {
		return err
	}
	last, err := pgstore.LastAssignmentToken(ctx, db.Pool)
	if err != nil || top <= last {
		return err
	}
	res := rep.result(FenceAhead)
	rep.set(FenceAhead, res.Count+1, append(append([]string{}, res.Examples...), "assignment_token"))
	return nil
}

// checkIdleRides fills RequestedRideIdle: idle REQUESTED rides without a PENDING offer (PostgreSQL),
// then their retry timers (Redis), then the rides without one read again (still idle).
func checkIdleRides(ctx context.Context, db *pgstore.DB, rs *redisstore.Store, grace time.Duration, rep Report) error {
	idle, err := pgstore.IdleRequestedRideIDs(ctx, db.Pool, grace, nil)
	if err != nil || len(idle) == 0 {
		return err
	}
	now, timers, err := rs.RetryTimers(ctx, idle)
	if err != nil {
		return err
	}
	var suspects []string
	for i, t := range timers {
		recent := !t.Deadline.IsZero() && t.Deadline.After(now.Add(-grace))
		if !t.Armed && !recent {
			suspects = append(suspects, idle[i])
		}
	}
	if len(suspects) == 0 {
		return nil
	}
	still, err := pgstore.IdleRequestedRideIDs(ctx, db.Pool, grace, suspects)
	if err != nil {
		return err
	}
	rep.set(RequestedRideIdle, len(still), still)
	return nil
}

// checkRidePositions fills RidePositionWrongDriver: settled active rides (PostgreSQL), the driver
// their live position names (Redis), then the suspects read again (still active with that driver
// and settled).
func checkRidePositions(ctx context.Context, db *pgstore.DB, rs *redisstore.Store, grace time.Duration, rep Report) error {
	active, err := pgstore.SettledActiveRides(ctx, db.Pool, grace, nil)
	if err != nil || len(active) == 0 {
		return err
	}
	ids := make([]string, len(active))
	for i, a := range active {
		ids[i] = a.RideID
	}
	drivers, err := rs.RidePositionDrivers(ctx, ids)
	if err != nil {
		return err
	}
	shown := map[string]string{}
	var suspects []string
	for i, a := range active {
		if d := drivers[i]; d != "" && d != a.DriverID {
			shown[a.RideID] = d
			suspects = append(suspects, a.RideID)
		}
	}
	if len(suspects) == 0 {
		return nil
	}
	fresh, err := pgstore.SettledActiveRides(ctx, db.Pool, grace, suspects)
	if err != nil {
		return err
	}
	var wrong []string
	for _, a := range fresh {
		if shown[a.RideID] != a.DriverID {
			wrong = append(wrong, a.RideID)
		}
	}
	rep.set(RidePositionWrongDriver, len(wrong), wrong)
	return nil
}
