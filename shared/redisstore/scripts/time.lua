-- time.lua: reads the clock of the server holding KEYS[1].
--
-- KEYS[1] any key of the store (P deadlines): declared only so that a Redis Cluster routes the
--         script to the shard of the store's hash tag; not touched.
-- ARGV: none.
-- Returns TIME's reply: {unix seconds, microseconds}.
return redis.call('TIME')
