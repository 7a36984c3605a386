package lifecycle

import (
	"context"
	"sort"
	"time"

	"github.com/flagdown/flagdown/shared/logging"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// AssignmentCheck is one driver's assignment as PostgreSQL and Redis hold it.
type AssignmentCheck struct {
	DriverID string
	// PG is his driver_assignments row (zero when he has none).
	PG pgstore.AssignmentRow
	// HasRow reports whether PG is a real row.
	HasRow bool
	// Redis is what Redis holds of him.
	Redis redisstore.AssignmentState
}

// Settled reports whether the PostgreSQL side changed longer than grace ago, so that an effect
// still on its way to Redis is not taken for a divergence.
func (c AssignmentCheck) Settled(grace time.Duration) bool { return !c.HasRow || c.PG.Age >= grace }

// Diverged reports whether Redis disagrees with PostgreSQL about the driver's ride: a different
// ride (or one where PostgreSQL has none), or in the available set while on a ride.
func (c AssignmentCheck) Diverged() bool {
	if c.Redis.RideID != c.PG.RideID {
		return true
	}
	return c.PG.RideID != "" && c.Redis.InAvailable
}

// CheckAssignments compares every driver PostgreSQL has on a ride, and every driver Redis shows on
// a ride, between the two stores. The result is sorted by driver id.
func CheckAssignments(ctx context.Context, db pgstore.Querier, rs *redisstore.Store) ([]AssignmentCheck, error) {
	active, err := pgstore.ActiveAssignments(ctx, db)
	if err != nil {
		return nil, err
	}
	onRide, err := rs.OnRideDrivers(ctx)
	if err != nil {
		return nil, err
	}
	rows := make(map[string]pgstore.AssignmentRow, len(active))
	for _, a := range active {
		rows[a.DriverID] = a
	}
	var missing []string
	for _, id := range onRide {
		if _, ok := rows[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		more, err := pgstore.AssignmentsOf(ctx, db, missing)
		if err != nil {
			return nil, err
		}
		for id, a := range more {
			rows[id] = a
		}
	}
	ids := make([]string, 0, len(rows)+len(missing))
	seen := map[string]bool{}
	for id := range rows {
		ids, seen[id] = append(ids, id), true
	}
	for _, id := range missing {
		if !seen[id] {
			ids, seen[id] = append(ids, id), true
		}
	}
	sort.Strings(ids)
	out := make([]AssignmentCheck, 0, len(ids))
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		states, err := rs.AssignmentStates(ctx, chunk)
		if err != nil {
			return nil, err
		}
		for i, id := range chunk {
			row, ok := rows[id]
			out = append(out, AssignmentCheck{DriverID: id, PG: row, HasRow: ok, Redis: states[i]})
		}
	}
	return out, nil
}

// Ahead reports whether Redis holds a newer fencing token for the driver than PostgreSQL's row:
// PostgreSQL moved backwards (a failover to an asynchronous replica, a point-in-time restore) after
// Redis applied a change PostgreSQL no longer has.
func (c AssignmentCheck) Ahead() bool { return c.HasRow && c.Redis.Epoch > c.PG.Epoch }

// Behind reports whether Redis's fence for the driver is older than PostgreSQL's token: the
// change PostgreSQL committed last has not reached Redis (judge it only once Settled).
func (c AssignmentCheck) Behind() bool { return c.HasRow && c.Redis.Epoch < c.PG.Epoch }

// takeOver reports whether the repair must take PostgreSQL's word with a new token rather than
// re-apply the row's: Redis is ahead, or at the row's own token it says something else while it
// still holds the hash that token wrote (a token PostgreSQL handed out again after moving back).
func (c AssignmentCheck) takeOver() bool {
	return c.Ahead() || (c.HasRow && c.Diverged() && c.Redis.Exists && c.Redis.Epoch == c.PG.Epoch && c.Redis.RideID != c.PG.RideID)
}

// RepairAssignments makes Redis hold PostgreSQL's assignment of every driver on whom the two
// disagree (CheckAssignments), in both directions of ride and of time: a driver PostgreSQL has free
// but Redis shows on a ride (with that ride's live position) is freed; a driver PostgreSQL has on a
// ride but Redis shows free, on another ride or in the available set gets his ride back; a driver
// whose change Redis missed (Behind) gets it. Drivers whose assignment changed less than grace ago
// are left alone (their effect may still be on its way). Every repair is ApplyAssignment,
// compare-and-set on the fencing token read from PostgreSQL, so a snapshot that a newer change
// overtook is a no-op: it repairs nothing that was right. When Redis is ahead of PostgreSQL
// (Ahead), compare-and-set could never win: PostgreSQL's word is taken instead, by a new token past
// Redis's under the driver's row lock (pgstore.FenceAssignment), then applied. First of all, if
// Redis applied a token past the last one PostgreSQL's sequence handed out (PostgreSQL moved
// backwards), the sequence is moved past it, so that every later change of every driver reaches
// Redis. It returns how many drivers it changed. A driver Redis shows on a ride who has no row in
// PostgreSQL (stranded before versions existed) gets a free row first, then the same repair.
func (s *Service) RepairAssignments(ctx context.Context, grace time.Duration) (int, error) {
	if err := s.advanceTokens(ctx); err != nil {
		return 0, err
	}
	checks, err := CheckAssignments(ctx, s.d.DB.Pool, s.d.Redis)
	if err != nil {
		return 0, err
	}
	fixed := 0
	for _, c := range checks {
		if !c.Settled(grace) || !(c.Diverged() || c.Ahead() || c.Behind()) {
			continue
		}
		a := c.PG.Assignment
		if !c.HasRow {
			// PostgreSQL never assigned him a ride (every active ride has a row, migration 00003):
			// he is free there. Give him a row so the repair has a token, unless one appeared meanwhile.
			if _, err := pgstore.EnsureAssignmentRow(ctx, s.d.DB.Pool, c.DriverID); err != nil {
				return fixed, err
			}
			rows, err := pgstore.AssignmentsOf(ctx, s.d.DB.Pool, []string{c.DriverID})
			if err != nil {
				return fixed, err
			}
			c.PG, c.HasRow = rows[c.DriverID], true
			a = c.PG.Assignment
		}
		if c.takeOver() {
			row, ok, err := pgstore.FenceAssignment(ctx, s.d.DB, c.DriverID, c.PG.Epoch, c.Redis.Epoch)
			if err != nil {
				return fixed, err
			}
			if !ok {
				continue // his row changed meanwhile: that change's effect is on its way
			}
			s.d.Log.Warn("reconcile: Redis held a newer token than PostgreSQL; PostgreSQL's word taken with a new token",
				logging.DriverID(c.DriverID), "redis_epoch", c.Redis.Epoch, "pg_epoch", c.PG.Epoch, "new_epoch", row.Epoch)
			a = row.Assignment
		}
		res, err := s.d.Redis.ApplyAssignment(ctx, a)
		if err != nil {
			return fixed, err
		}
		if res != redisstore.AssignNoop {
			fixed++
			s.d.Log.Warn("reconcile repaired a driver's assignment in Redis", logging.DriverID(c.DriverID),
				"redis_ride", c.Redis.RideID, "redis_epoch", c.Redis.Epoch, "pg_ride", c.PG.RideID, "pg_epoch", a.Epoch)
		}
	}
	return fixed, nil
}

// advanceTokens moves PostgreSQL's token sequence past the highest token Redis applied (P
// fence:max) when it is behind it: PostgreSQL moved backwards, and without this every driver's next
// change would carry a token Redis already saw.
func (s *Service) advanceTokens(ctx context.Context) error {
	top, err := s.d.Redis.MaxFence(ctx)
	if err != nil || top == 0 {
		return err
	}
	last, err := pgstore.LastAssignmentToken(ctx, s.d.DB.Pool)
	if err != nil || last >= top {
		return err
	}
	s.d.Log.Warn("reconcile: Redis applied fencing tokens PostgreSQL has not handed out (PostgreSQL moved backwards); moving its sequence past them",
		"redis_max_token", top, "pg_last_token", last)
	return pgstore.AdvanceAssignmentTokens(ctx, s.d.DB.Pool, top)
}
