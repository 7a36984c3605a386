-- +goose Up
-- Street-hail pairing (README "Street hail"): a ride is either requested (order-create, then
-- matched through offers) or hailed (a rider and a driver pressed "hail" together; the ride is
-- created ACCEPTED with that driver, without any offer). origin tells them apart for the record and
-- for the figures; every other rule (statuses, guards, versions) is the same for both.
ALTER TABLE rides ADD COLUMN origin text NOT NULL DEFAULT 'request' CHECK (origin IN ('request', 'hail'));

-- +goose Down
ALTER TABLE rides DROP COLUMN origin;
