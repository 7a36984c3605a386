package lifecycle

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// MatchDeferred: batch matching left the ride without a driver in this window (its candidates went
// to other rides of the window); it waits for the next window. See Service.DeferToNextWindow.
const MatchDeferred = "deferred"

// BatchDue announces that the window of batch name closed at deadlineMs (unix ms, Redis's clock:
// the batch timer's indexed deadline), as match.batch.due, once per window: the event id is derived
// from (name, deadlineMs), so every handler of the same expiry writes one event. It is stale when
// the announcement was written already.
func (s *Service) BatchDue(ctx context.Context, name string, deadlineMs int64, ev *EventRef) (Outcome, error) {
	out := OutcomeStale
	first, err := s.change(ctx, ev, func(tx pgx.Tx, _ *dispatch.Effects) error {
		out = OutcomeStale
		wrote, err := pgstore.InsertOutboxOnce(ctx, tx, BatchDueEventID(name, deadlineMs), pgstore.OutboxEvent{
			Type: events.MatchBatchDue, Source: s.Source, Subject: name,
			OrderingKey: "batch:" + name,
			Data:        events.MatchBatchDueData{Batch: name, DeadlineMs: deadlineMs},
		})
		if wrote {
			out = OutcomeDone
		}
		return err
	})
	if !first {
		return OutcomeDuplicate, err
	}
	return out, err
}

// BatchDueEventID is the event id of the match.batch.due event of batch name's window that closed
// at deadlineMs.
func BatchDueEventID(name string, deadlineMs int64) string {
	return pgstore.OnceID("match.batch.due", name, time.UnixMilli(deadlineMs).UTC().Format(time.RFC3339Nano))
}

// ClaimBatch claims the rides of batch name's window that closed at deadlineMs for the run
// triggered by ev (a match.batch.due event), so that each window's rides are handled by one run:
//
//   - a claim already in Redis is returned as it is (New false): a second run of the window finishes
//     what the first may have left, each ride's change then being idempotent on RideEvent; once the
//     window is done (FinishBatch) the result is Done and the run does nothing;
//   - otherwise ev is recorded in processed_events first: an event seen before (a late duplicate,
//     older than redisstore.BatchRunTTL) is Done too; the first run moves the waiting rides into the
//     claim (redisstore.ClaimBatch).
//
// Rides left in a claim by a run that died are REQUESTED rides nothing works on: reconcile matches
// them again after FLAGDOWN_RECONCILE_GRACE.
func (s *Service) ClaimBatch(ctx context.Context, name string, deadlineMs int64, ev *EventRef) (redisstore.BatchClaim, error) {
	c, ok, err := s.d.Redis.PeekBatchClaim(ctx, name, deadlineMs)
	if err != nil || ok {
		return c, err
	}
	first, err := s.change(ctx, ev, func(pgx.Tx, *dispatch.Effects) error { return nil })
	if err != nil {
		return redisstore.BatchClaim{}, err
	}
	if !first {
		return redisstore.BatchClaim{Done: true}, nil
	}
	return s.d.Redis.ClaimBatch(ctx, name, deadlineMs)
}

// FinishBatch marks batch name's window that closed at deadlineMs handled (redisstore.FinishBatch).
func (s *Service) FinishBatch(ctx context.Context, name string, deadlineMs int64) error {
	return s.d.Redis.FinishBatch(ctx, name, deadlineMs)
}

// RideEvent is the EventRef of ride rideID's change within the batch run triggered by ev: one per
// (window, ride), so a second run of the same window changes no ride twice.
func RideEvent(ev *EventRef, rideID string) *EventRef {
	return &EventRef{Consumer: ev.Consumer, Source: ev.Source, ID: ev.ID + "/" + rideID}
}

// RidesToMatch returns the rides among ids a batch window can still offer (REQUESTED, without a
// live offer), in the order of ids, and for each the drivers already offered it
// (pgstore.RidesToMatch; read without locks, Match re-checks).
func (s *Service) RidesToMatch(ctx context.Context, ids []string) ([]*dispatch.Ride, map[string]map[string]bool, error) {
	return pgstore.RidesToMatch(ctx, s.d.DB.Pool, ids)
}

// JoinBatch puts rideID into the city batch for the next window and arms the batch timer
// (FLAGDOWN_BATCH_WINDOW) unless it is armed. Joining is a Redis write only, idempotent, and
// changes no ride: the window's run re-checks every ride under its lock (Match).
func (s *Service) JoinBatch(ctx context.Context, rideID string) error {
	_, err := s.d.Redis.JoinBatch(ctx, redisstore.CityBatch, []string{rideID}, s.d.Rules.BatchWindow)
	return err
}

// DeferToNextWindow handles a ride a batch window had candidates for but assigned none of them (they
// went to other rides of the window, at a lower total score): if it is still REQUESTED without a live
// offer it waits for the next window (it re-joins the batch after the commit, with note recorded as
// its match_note); it does not count as a match attempt, since nobody was tried, but the retry budget
// holds: once FLAGDOWN_RETRY_BUDGET has passed since match_started_at the ride becomes UNMATCHED, as
// Match would make it. Outcomes: MatchDeferred, MatchUnmatched, MatchNotNeeded, MatchDuplicate.
func (s *Service) DeferToNextWindow(ctx context.Context, rideID, note string, ev *EventRef) (string, error) {
	c := s.d.Rules
	outcome := ""
	first, err := s.change(ctx, ev, func(tx pgx.Tx, fx *dispatch.Effects) error {
		outcome = MatchNotNeeded
		ride, err := lockRide(ctx, tx, rideID)
		if err != nil {
			return err
		}
		if _, err := dispatch.Transition(ride.Status, dispatch.ActionOffer, dispatch.ActorSystem); err != nil {
			return nil
		}
		_, pending, now, err := pgstore.PrepareMatch(ctx, tx, ride.ID)
		if err != nil || pending {
			return err
		}
		if now.Sub(ride.MatchStartedAt) >= c.RetryBudget {
			if err := pgstore.NoteMatchAttempt(ctx, tx, ride.ID, false, note); err != nil {
				return err
			}
			outcome = MatchUnmatched
			return s.unmatch(ctx, tx, ride, ride.MatchAttempts+1, note)
		}
		if err := pgstore.TouchRide(ctx, tx, ride.ID, note); err != nil {
			return err
		}
		outcome = MatchDeferred
		fx.BatchJoins = append(fx.BatchJoins, ride.ID)
		return nil
	})
	if !first {
		return MatchDuplicate, err
	}
	return outcome, err
}
