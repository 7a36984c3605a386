-- +goose Up
-- Versions that make Redis a projection of PostgreSQL that cannot go backwards (see the README's
-- "State guarantees"). Every change of a ride's status bumps rides.version; every change of a
-- driver's assignment bumps driver_assignments.epoch, in the same transaction. Redis applies an
-- effect only if its version is newer than the one it holds.
ALTER TABLE rides ADD COLUMN version bigint NOT NULL DEFAULT 1 CHECK (version > 0);

-- The retry budget's clock: when the current round of matching began. Set at the request and again
-- when an ACCEPTED ride is re-opened (a fresh budget); match_attempts restarts at 0 then too.
ALTER TABLE rides ADD COLUMN match_started_at timestamptz;
UPDATE rides SET match_started_at = created_at;
ALTER TABLE rides ALTER COLUMN match_started_at SET NOT NULL;
ALTER TABLE rides ALTER COLUMN match_started_at SET DEFAULT now();

-- One row per driver who ever held a ride: his current active ride (NULL when free) and the
-- assignment epoch, bumped by every accept, start, complete, cancel and re-open that concerns him.
-- The row is also the per-driver lock of those changes (always taken after the ride row).
CREATE TABLE driver_assignments (
    driver_id   text PRIMARY KEY CHECK (length(driver_id) BETWEEN 1 AND 128),
    epoch       bigint NOT NULL CHECK (epoch > 0),
    ride_id     uuid REFERENCES rides(id),
    ride_status text CHECK (ride_status IS NULL OR ride_status IN ('ACCEPTED','IN_PROGRESS')),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((ride_id IS NULL) = (ride_status IS NULL))
);
-- A ride is the active ride of at most one driver.
CREATE UNIQUE INDEX driver_assignments_one_per_ride ON driver_assignments (ride_id) WHERE ride_id IS NOT NULL;

-- Drivers who hold an active ride today get their row (deployments upgraded with rides in flight).
INSERT INTO driver_assignments (driver_id, epoch, ride_id, ride_status)
SELECT driver_id, 1, id, status FROM rides WHERE status IN ('ACCEPTED','IN_PROGRESS');

-- Retention (reconcile prunes by age): indexes for the pruning scans.
CREATE INDEX processed_events_age ON processed_events (processed_at);
CREATE INDEX outbox_published_age ON outbox (published_at) WHERE published_at IS NOT NULL;
CREATE INDEX offers_decided_age ON offers (created_at) WHERE status <> 'PENDING';

-- +goose Down
DROP INDEX offers_decided_age;
DROP INDEX outbox_published_age;
DROP INDEX processed_events_age;
DROP TABLE driver_assignments;
ALTER TABLE rides DROP COLUMN match_started_at;
ALTER TABLE rides DROP COLUMN version;
