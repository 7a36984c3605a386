-- +goose Up
-- No NOTIFY at commit. The outbox_notify trigger sent one pg_notify per transaction that wrote
-- outbox rows; a notifying transaction takes PostgreSQL's notify-queue lock (one for the whole
-- cluster) at commit, so every such commit waited for the one before it: commits were
-- serialized. The relays now find rows by polling the outbox_unpublished partial index (a short,
-- adaptive poll, cheap when the index is empty; shared/outbox) and, in the process that committed
-- the row, through an in-process wake-up (pgstore.DB.OnOutboxCommit). An explicit
-- pg_notify('flagdown_outbox', schema) (pgstore.DB.WakeRelays, used by reconcile) still wakes
-- them: that is one notification per call, not one per commit.
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify();

-- +goose Down
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
