-- +goose Up
-- When the first match attempt for a ride finished, offered or not: first_match_at − created_at is the
-- dispatch pipeline's latency (outbox relay, broker, trigger, match), whatever the supply of drivers.
ALTER TABLE rides ADD COLUMN first_match_at timestamptz;

-- +goose Down
ALTER TABLE rides DROP COLUMN first_match_at;
