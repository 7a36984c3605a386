-- +goose Up
-- Surge and the wait estimate recorded on each ride (shared/pricing): the multiplier the rider was
-- charged (1.0 without surge; fare_estimate_cents includes it), the multiplier computed for his
-- pickup cell (equal to the charged one in surge mode on, what it would have been in shadow mode,
-- NULL when surge was off), and the pickup wait he was quoted, seconds (NULL when no driver was near).
ALTER TABLE rides
    ADD COLUMN surge_multiplier double precision NOT NULL DEFAULT 1 CHECK (surge_multiplier >= 1 AND surge_multiplier <= 100),
    ADD COLUMN surge_computed double precision CHECK (surge_computed >= 1 AND surge_computed <= 100),
    ADD COLUMN quoted_wait_s double precision CHECK (quoted_wait_s >= 0);

-- +goose Down
ALTER TABLE rides DROP COLUMN quoted_wait_s, DROP COLUMN surge_computed, DROP COLUMN surge_multiplier;
