-- +goose Up
-- How many ride.retry events were issued for the ride since match last recorded an attempt on it
-- (lifecycle.Service.RetryDue counts one, pgstore.NoteMatchAttempt sets 0). Reconcile waits
-- grace × 2^n (n capped, pgstore.RetryBackoffMaxDoublings) before it retries an idle ride again,
-- so rides whose retry still sits in match's backlog are not retried again every grace (each
-- pass would lengthen the backlog it is waiting on), while a lost retry is still retried.
ALTER TABLE rides ADD COLUMN unanswered_retries integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE rides DROP COLUMN unanswered_retries;
