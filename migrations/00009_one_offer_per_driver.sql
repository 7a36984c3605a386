-- +goose Up
-- A driver holds at most one PENDING offer, and none while he is on a ride (review item 5 of
-- issue 17). The matcher asks PostgreSQL before it offers a driver Redis shows available
-- (lifecycle.Window.DriverFree, under his driver_assignments row lock); these are the guards that
-- hold whatever the code does, e.g. when Redis lost an offer lock or a commit's outcome was unknown.

-- Offers an older version left PENDING twice for one driver: the newest stays, the others expire.
UPDATE offers o SET status = 'EXPIRED', responded_at = now()
WHERE o.status = 'PENDING' AND EXISTS (
    SELECT 1 FROM offers n WHERE n.driver_id = o.driver_id AND n.status = 'PENDING'
      AND (n.created_at, n.id) > (o.created_at, o.id));
CREATE UNIQUE INDEX offers_one_pending_per_driver ON offers (driver_id) WHERE status = 'PENDING';

-- A PENDING offer to a driver whose driver_assignments row holds a ride is refused. FOR SHARE
-- waits for a concurrent accept or street hail that is setting his ride, then re-reads the row.
-- +goose StatementBegin
CREATE FUNCTION offers_driver_not_on_ride() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'PENDING' THEN
        PERFORM 1 FROM driver_assignments WHERE driver_id = NEW.driver_id AND ride_id IS NOT NULL FOR SHARE;
        IF FOUND THEN
            RAISE EXCEPTION 'driver % is on a ride and cannot hold a PENDING offer', NEW.driver_id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'offers_driver_not_on_ride';
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER offers_driver_not_on_ride BEFORE INSERT OR UPDATE OF status, driver_id ON offers
    FOR EACH ROW EXECUTE FUNCTION offers_driver_not_on_ride();

-- +goose Down
DROP TRIGGER offers_driver_not_on_ride ON offers;
DROP FUNCTION offers_driver_not_on_ride();
DROP INDEX offers_one_pending_per_driver;
