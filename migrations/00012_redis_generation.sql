-- +goose Up
-- The Redis generation (P generation, a random id Redis gets when the key is missing) that reconcile
-- last rebuilt Redis for, per key prefix. Redis holding another one means it lost that prefix's
-- data since (restarted empty, flushed, or another server): reconcile rebuilds from PostgreSQL
-- what Redis must hold (assignments, pending offers' locks and timers, retry timers) at once,
-- without waiting for its grace.
CREATE TABLE redis_generations (
    prefix      text PRIMARY KEY,
    generation  text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE redis_generations;
