-- +goose Up
-- Rides: the source of truth for every ride. Coordinates are WGS84 degrees.
CREATE TABLE rides (
    id                  uuid PRIMARY KEY,
    rider_id            text NOT NULL CHECK (length(rider_id) BETWEEN 1 AND 128),
    status              text NOT NULL CHECK (status IN ('REQUESTED','ACCEPTED','IN_PROGRESS','COMPLETED','CANCELLED','UNMATCHED')),
    pickup_lat          double precision NOT NULL CHECK (pickup_lat BETWEEN -85.05112878 AND 85.05112878),
    pickup_lng          double precision NOT NULL CHECK (pickup_lng BETWEEN -180 AND 180),
    dropoff_lat         double precision NOT NULL CHECK (dropoff_lat BETWEEN -85.05112878 AND 85.05112878),
    dropoff_lng         double precision NOT NULL CHECK (dropoff_lng BETWEEN -180 AND 180),
    driver_id           text CHECK (driver_id IS NULL OR length(driver_id) BETWEEN 1 AND 128),
    -- Fare estimate in the smallest currency unit (cents), with the distance (metres) and
    -- duration (seconds) it was computed from.
    fare_estimate_cents bigint NOT NULL CHECK (fare_estimate_cents >= 0),
    est_distance_m      double precision NOT NULL CHECK (est_distance_m >= 0),
    est_duration_s      double precision NOT NULL CHECK (est_duration_s >= 0),
    idempotency_key     text,
    match_attempts      integer NOT NULL DEFAULT 0,
    match_note          text,
    cancelled_by        text CHECK (cancelled_by IS NULL OR cancelled_by IN ('rider','driver','system')),
    cancel_reason       text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    first_offered_at    timestamptz,
    accepted_at         timestamptz,
    started_at          timestamptz,
    completed_at        timestamptz,
    cancelled_at        timestamptz,
    -- A ride with a driver is ACCEPTED or later; a REQUESTED ride has none.
    CHECK ((status IN ('ACCEPTED','IN_PROGRESS','COMPLETED')) = (driver_id IS NOT NULL) OR status = 'CANCELLED' OR status = 'UNMATCHED')
);

-- At most one open ride per rider.
CREATE UNIQUE INDEX rides_one_open_per_rider ON rides (rider_id)
    WHERE status IN ('REQUESTED','ACCEPTED','IN_PROGRESS');
-- At most one active ride per driver, whatever the application code does.
CREATE UNIQUE INDEX rides_one_active_per_driver ON rides (driver_id)
    WHERE status IN ('ACCEPTED','IN_PROGRESS');
-- The same Idempotency-Key from the same rider always names the same ride.
CREATE UNIQUE INDEX rides_idempotency ON rides (rider_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX rides_requested ON rides (created_at) WHERE status = 'REQUESTED';

-- Offers: one row per (ride, driver) proposal. expires_at is the end of the offer window.
CREATE TABLE offers (
    id            uuid PRIMARY KEY,
    ride_id       uuid NOT NULL REFERENCES rides(id),
    driver_id     text NOT NULL CHECK (length(driver_id) BETWEEN 1 AND 128),
    status        text NOT NULL CHECK (status IN ('PENDING','ACCEPTED','DECLINED','EXPIRED','CANCELLED')),
    distance_m    double precision NOT NULL CHECK (distance_m >= 0),
    score         double precision NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    responded_at  timestamptz,
    CHECK (expires_at > created_at)
);
-- At most one live offer per ride.
CREATE UNIQUE INDEX offers_one_pending_per_ride ON offers (ride_id) WHERE status = 'PENDING';
CREATE INDEX offers_by_ride_driver ON offers (ride_id, driver_id);
CREATE INDEX offers_pending_by_driver ON offers (driver_id) WHERE status = 'PENDING';

-- Outbox: events written in the same transaction as the state change they announce.
-- The relay publishes rows in id order per ordering_key (the ride or driver id).
CREATE TABLE outbox (
    id            bigserial PRIMARY KEY,
    event_id      uuid NOT NULL UNIQUE,
    type          text NOT NULL,
    source        text NOT NULL,
    subject       text NOT NULL,
    ordering_key  text NOT NULL,
    data          jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz
);
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_unpublished_key ON outbox (ordering_key, id) WHERE published_at IS NULL;

-- Wake relays on insert. The payload is the schema name so that relays of several
-- schemas (tests, tenants) sharing one database only wake for their own rows.
-- +goose StatementBegin
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('flagdown_outbox', TG_TABLE_SCHEMA);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- Events already handled by a consumer: (consumer, source, id) makes every consumer idempotent.
CREATE TABLE processed_events (
    consumer     text NOT NULL,
    source       text NOT NULL,
    id           text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, source, id)
);

-- +goose Down
DROP TABLE processed_events;
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify();
DROP TABLE outbox;
DROP TABLE offers;
DROP TABLE rides;
