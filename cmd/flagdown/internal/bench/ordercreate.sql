-- order-create's transaction for pgbench (flagdown bench): the ride and its ride.requested outbox
-- row, the statements pgstore.CreateRide sends, pipelined in one round trip as one implicit
-- transaction (pgbench's pipeline mode sends one Sync at \endpipeline, as a pgx batch). The ride id
-- is derived from a random number (pgbench has no UUID generator) so both rows name the same ride;
-- every rider is new, as in the bench through the handler. The JSON is built server-side (a literal
-- would hold ":<digits>", which pgbench takes for variables); same keys and size as the real payload.
\set r random(1, 9000000000000000000)
\startpipeline
INSERT INTO rides (id, rider_id, status, pickup_lat, pickup_lng, dropoff_lat, dropoff_lng,
	fare_estimate_cents, est_distance_m, est_duration_s, idempotency_key)
	VALUES (md5(:client_id || '-' || :r)::uuid, 'pgbench-' || :client_id || '-' || :r, 'REQUESTED',
	40.7569, -73.9903, 40.7128, -73.9961, 1784, 6100.5, 871.5, NULL)
	RETURNING created_at, match_started_at, version;
INSERT INTO outbox (event_id, type, source, subject, ordering_key, data)
	VALUES (md5('ev-' || :client_id || '-' || :r)::uuid, 'io.flagdown.ride.requested.v1', '/flagdown/order-create',
	md5(:client_id || '-' || :r)::uuid::text, md5(:client_id || '-' || :r)::uuid::text,
	jsonb_build_object('ride_id', md5(:client_id || '-' || :r)::uuid, 'rider_id', 'pgbench-' || :client_id || '-' || :r,
	'pickup', jsonb_build_object('lat', 40.7569, 'lng', -73.9903), 'dropoff', jsonb_build_object('lat', 40.7128, 'lng', -73.9961),
	'fare_estimate_cents', 1784, 'requested_at', now()));
\endpipeline
