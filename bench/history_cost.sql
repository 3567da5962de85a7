-- What bench/history_cost.py runs on the database it fills: the history
-- itself, set-based, and the figures it reads. %% is a literal % (the
-- statements take parameters).

-- name: fill
-- Resolved messages g = first..last of total, as the load's own producer
-- group and topic leave them: born step seconds apart from start, resolved
-- a second later (one in ten rolled back), each with its two history rows,
-- and no delivery (every group acked them; none was subscribed yet). The
-- ids look like the coordinator's (32 hex digits) and spread evenly over
-- the whole key space, so that the load's random ids land anywhere in the
-- indexes, as in a database that took years of them; they ascend with g,
-- so that the fill itself appends to the indexes and stays fast.
WITH filled AS (
    INSERT INTO messages (message_id, transaction_id, kind, producer_group, topic, body,
                          state, born_at, resolved_at, resolution_source)
    SELECT upper(k.key), k.key, 'transactional', %(producer_group)s::text, %(topic)s::text,
           convert_to(%(body)s::text, 'UTF8'),
           CASE WHEN g %% 10 = 0 THEN 'rolled_back' ELSE 'committed' END,
           %(start)s::timestamptz + make_interval(secs => (g - 1) * %(step)s::float8),
           %(start)s::timestamptz + make_interval(secs => (g - 1) * %(step)s::float8 + 1),
           'client'
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
    -- 15 hex digits of g's place in [0, 2^60), then 17 of a hash of g.
    CROSS JOIN LATERAL (
        SELECT lpad(to_hex(((g - 1)::numeric * 1152921504606846976 / %(total)s::bigint)::bigint),
                    15, '0')
               || substr(md5(g::text), 1, 17) AS key
    ) AS k
    ORDER BY g
    RETURNING id, state, born_at, resolved_at
)
INSERT INTO message_history (message_offset, at, source, from_state, to_state)
SELECT f.id, h.at, 'client', h.from_state, h.to_state
FROM filled f
CROSS JOIN LATERAL (VALUES (f.born_at, NULL::text, 'prepared'),
                           (f.resolved_at, 'prepared', f.state)) AS h (at, from_state, to_state)
ORDER BY f.id, h.at;

-- name: vacuum
-- Once filled: the planner's statistics and the visibility map, as
-- autovacuum would have left them on a database that grew over time.
VACUUM (ANALYZE) messages, message_history, deliveries;

-- name: figures
-- Rows and bytes (with indexes and TOAST) of the tables the history fills.
SELECT t.name,
       (SELECT c.reltuples FROM pg_class c WHERE c.oid = t.name::regclass)::bigint AS rows,
       pg_total_relation_size(t.name::regclass) AS bytes
FROM unnest(ARRAY['messages', 'message_history', 'deliveries']) AS t (name)
ORDER BY t.name;

-- name: io
-- What the server wrote to its WAL (the whole server: only one database is
-- under load at a time) and what this database read from outside shared
-- buffers, so far. A random key's insert into an index far larger than the
-- cache dirties a page that was not dirty since the last checkpoint: one
-- full-page image in the WAL each.
SELECT w.wal_records, w.wal_fpi, w.wal_bytes::bigint AS wal_bytes, d.blks_read, d.blks_hit
FROM pg_stat_wal w
CROSS JOIN pg_stat_database d
WHERE d.datname = current_database();
