-- +goose Up
-- Devices: the phones a rider or driver registered for mobile push (shared/push), each with the
-- Amazon SNS platform endpoint that delivers to it. One row per (role, user, device token); an SNS
-- endpoint belongs to one user at a time (the last one who registered its token on that phone).
CREATE TABLE devices (
    role          text NOT NULL CHECK (role IN ('driver','rider')),
    user_id       text NOT NULL CHECK (length(user_id) BETWEEN 1 AND 128),
    -- fcm: Firebase Cloud Messaging; apns, apns_sandbox: Apple's production and sandbox services.
    platform      text NOT NULL CHECK (platform IN ('fcm','apns','apns_sandbox')),
    -- The token the push service gave the app (FCM registration token, APNs device token in lower-case hex).
    token         text NOT NULL CHECK (length(token) BETWEEN 1 AND 8192),
    endpoint_arn  text NOT NULL CHECK (endpoint_arn LIKE 'arn:%:sns:%:endpoint/%' AND length(endpoint_arn) <= 1024),
    -- false once SNS answered EndpointDisabled (the push service refused the token): no more pushes
    -- until the app registers the token again.
    enabled       boolean NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role, user_id, token)
);
CREATE UNIQUE INDEX devices_one_user_per_endpoint ON devices (endpoint_arn);
CREATE INDEX devices_enabled_by_user ON devices (role, user_id) WHERE enabled;

-- +goose Down
DROP TABLE devices;
