-- +goose Up
-- The W3C trace context (shared/tracing) of the transaction that wrote an outbox row: the relay
-- publishes the row's event in a span that continues this trace, and the event carries it on in
-- its traceparent and tracestate attributes (the CloudEvents distributed tracing extension). NULL
-- when tracing was off or the writer had no span. The values are observability data, never read
-- to decide anything, and bounded by their writer (tracing.Context: a traceparent of 55
-- characters, a tracestate of at most 512), so no constraint here can fail a state change.
ALTER TABLE outbox
    ADD COLUMN traceparent text,
    ADD COLUMN tracestate  text;

-- +goose Down
ALTER TABLE outbox DROP COLUMN tracestate, DROP COLUMN traceparent;
