-- +goose Up
-- The assignment epoch becomes a fencing token (review items 2 and 3 of issue 17): every change of a
-- driver's assignment takes the next value of one sequence, so a token is unique and orders every
-- change PostgreSQL ever committed, across drivers. Redis keeps, per driver, the highest token it
-- applied (P fence:{driver}, which outlives the driver hash) and the highest of all (P fence:max);
-- reconcile advances this sequence past P fence:max when PostgreSQL moved backwards (a failover to
-- an asynchronous replica, a point-in-time restore). The model is docs/resilience.md, "Fencing
-- tokens". driver_assignments.epoch keeps its name and holds the token.
CREATE SEQUENCE assignment_token AS bigint;
SELECT setval('assignment_token', coalesce((SELECT max(epoch) FROM driver_assignments), 0) + 1, false);

-- +goose Down
DROP SEQUENCE assignment_token;
