-- The two layouts bench/retention_layouts.py compares, each in a scratch
-- schema of its own, and the statements it runs on them. Table names in the
-- statements are unqualified: each connection's search_path puts the
-- layout's schema before the coordinator's (`coordinator`, where the
-- subscriptions the triggers read live). The coordinator's trigger
-- functions carry their schema as their own search_path, so each layout
-- gets copies without it (layout_schema): its triggers then write the
-- layout's own history and deliveries.

-- name: layout_schema
-- A layout's schema, with copies of the coordinator's trigger functions
-- that resolve tables through the caller's search_path (the layout first).
CREATE SCHEMA {layout};
DO $$
DECLARE
    definition text;
BEGIN
    FOR definition IN
        SELECT pg_get_functiondef(oid) FROM pg_proc
        WHERE pronamespace = 'coordinator'::regnamespace
          AND proname IN ('messages_changed', 'messages_deleted')
    LOOP
        definition := replace(definition, 'FUNCTION coordinator.', 'FUNCTION {layout}.');
        EXECUTE regexp_replace(definition, '\n SET search_path TO [^\n]*', '');
    END LOOP;
END
$$;

-- name: plain_layout
-- Today's tables: copies of the migrated ones with their indexes,
-- constraints, storage parameters and triggers.
CREATE TABLE retention_plain.messages (LIKE coordinator.messages INCLUDING ALL);
ALTER TABLE retention_plain.messages SET (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
CREATE TABLE retention_plain.message_history (LIKE coordinator.message_history INCLUDING ALL);
CREATE TABLE retention_plain.deliveries (LIKE coordinator.deliveries INCLUDING ALL);
ALTER TABLE retention_plain.deliveries SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
CREATE TRIGGER messages_changed_inserted AFTER INSERT ON retention_plain.messages
REFERENCING NEW TABLE AS new_messages
FOR EACH STATEMENT EXECUTE FUNCTION retention_plain.messages_changed();
CREATE TRIGGER messages_changed_updated AFTER UPDATE ON retention_plain.messages
REFERENCING OLD TABLE AS old_messages NEW TABLE AS new_messages
FOR EACH STATEMENT EXECUTE FUNCTION retention_plain.messages_changed();
CREATE TRIGGER messages_deleted AFTER DELETE ON retention_plain.messages
REFERENCING OLD TABLE AS old_messages
FOR EACH STATEMENT EXECUTE FUNCTION retention_plain.messages_deleted();

-- name: partitioned_layout
-- The same columns and checks, messages range-partitioned by born_at and
-- message_history by at, one partition per UTC day (add_days). A unique
-- index of a partitioned table must hold the partition key, so the
-- primary keys and the unique ids are unique per day only: a transaction id
-- or a retried message id is no longer checked across days. The BRIN index
-- on born_at is left out: the partition bounds do its job. Deliveries stay
-- one plain table (it holds only unacked work).
CREATE TABLE retention_partitioned.messages (
    LIKE coordinator.messages INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS
) PARTITION BY RANGE (born_at);
ALTER TABLE retention_partitioned.messages ADD PRIMARY KEY (id, born_at);
CREATE UNIQUE INDEX ON retention_partitioned.messages (transaction_id, born_at);
CREATE UNIQUE INDEX ON retention_partitioned.messages (message_id, producer_group, born_at)
WHERE producer_group IS NOT NULL;
CREATE UNIQUE INDEX ON retention_partitioned.messages (message_id, topic, born_at)
WHERE producer_group IS NULL;
CREATE INDEX ON retention_partitioned.messages (next_check_at) WHERE state = 'prepared';
CREATE INDEX ON retention_partitioned.messages (topic, state);
CREATE INDEX ON retention_partitioned.messages (resolved_at);
CREATE TABLE retention_partitioned.message_history (
    LIKE coordinator.message_history INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS
) PARTITION BY RANGE (at);
ALTER TABLE retention_partitioned.message_history ADD PRIMARY KEY (id, at);
CREATE INDEX ON retention_partitioned.message_history (message_offset);
CREATE TABLE retention_partitioned.deliveries (LIKE coordinator.deliveries INCLUDING ALL);
ALTER TABLE retention_partitioned.deliveries SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
CREATE TRIGGER messages_changed_inserted AFTER INSERT ON retention_partitioned.messages
REFERENCING NEW TABLE AS new_messages
FOR EACH STATEMENT EXECUTE FUNCTION retention_partitioned.messages_changed();
CREATE TRIGGER messages_changed_updated AFTER UPDATE ON retention_partitioned.messages
REFERENCING OLD TABLE AS old_messages NEW TABLE AS new_messages
FOR EACH STATEMENT EXECUTE FUNCTION retention_partitioned.messages_changed();
CREATE TRIGGER messages_deleted AFTER DELETE ON retention_partitioned.messages
REFERENCING OLD TABLE AS old_messages
FOR EACH STATEMENT EXECUTE FUNCTION retention_partitioned.messages_deleted();
-- One partition of each table per UTC day from first_day to last_day, named
-- by the day, so that names sort by time. Storage parameters belong to the
-- partitions (a partitioned table has no storage).
CREATE FUNCTION retention_partitioned.add_days(first_day date, last_day date) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    day date;
BEGIN
    FOR day IN SELECT d::date FROM generate_series(first_day, last_day, interval '1 day') AS d LOOP
        EXECUTE format(
            'CREATE TABLE retention_partitioned.%I PARTITION OF retention_partitioned.messages '
            'FOR VALUES FROM (%L) TO (%L) WITH (fillfactor = 85, '
            'autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05)',
            'messages_' || to_char(day, 'YYYYMMDD'),
            day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
        EXECUTE format(
            'CREATE TABLE retention_partitioned.%I PARTITION OF retention_partitioned.message_history '
            'FOR VALUES FROM (%L) TO (%L)',
            'message_history_' || to_char(day, 'YYYYMMDD'),
            day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
    END LOOP;
END
$$;

-- name: add_days
SELECT retention_partitioned.add_days(%(first_day)s::date, %(last_day)s::date);

-- name: drop_layout
-- {schema} is the layout's schema, an identifier.
DROP SCHEMA IF EXISTS {schema} CASCADE;

-- name: fill
-- Resolved messages g = first..last, born step seconds apart from start and
-- resolved a second later (one in ten rolled back), each with its two
-- history rows; one committed message in a hundred still has a delivery
-- for a group that never acked it.
WITH filled AS (
    INSERT INTO messages (message_id, transaction_id, kind, producer_group, topic, body,
                          state, born_at, resolved_at, resolution_source)
    SELECT 'fill-' || g, 'fill-transaction-' || g, 'transactional', 'bench-retention',
           'bench-retention', '\x6f72646572203130303120637265617465640a'::bytea,
           CASE WHEN g %% 10 = 0 THEN 'rolled_back' ELSE 'committed' END,
           %(start)s::timestamptz + make_interval(secs => (g - 1) * %(step)s::float8),
           %(start)s::timestamptz + make_interval(secs => (g - 1) * %(step)s::float8 + 1),
           'client'
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
    RETURNING id, topic, state, born_at, resolved_at
),
history AS (
    INSERT INTO message_history (message_offset, at, source, from_state, to_state)
    SELECT f.id, h.at, 'client', h.from_state, h.to_state
    FROM filled f
    CROSS JOIN LATERAL (VALUES (f.born_at, NULL::text, 'prepared'),
                               (f.resolved_at, 'prepared', f.state)) AS h (at, from_state, to_state)
)
INSERT INTO deliveries (message_offset, consumer_group, topic, committed_at, visible_at)
SELECT id, 'bench-abandoned', topic, resolved_at, resolved_at
FROM filled
WHERE state = 'committed' AND id %% 100 = 0;

-- name: empty_tables
TRUNCATE messages, message_history, deliveries;
ANALYZE messages, message_history, deliveries;

-- name: analyze
ANALYZE messages, message_history, deliveries;

-- name: vacuum
VACUUM (ANALYZE) messages, message_history, deliveries;

-- name: count_older
-- Messages resolved before the cutoff: what a removal takes, and after it, none.
SELECT count(*) AS messages FROM messages WHERE resolved_at < %(cutoff)s;

-- name: orphan_deliveries
-- Deliveries whose message is gone: a removal must leave none.
SELECT count(*) AS deliveries
FROM deliveries d
WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = d.message_offset);

-- name: delete_oldest
-- One batch of the retention job's kind: the oldest resolved messages
-- older than the cutoff, skipping rows another transaction holds; the
-- trigger messages_deleted takes their history and deliveries along.
WITH doomed AS (
    SELECT id
    FROM messages
    WHERE resolved_at < %(cutoff)s AND state <> 'prepared'
    ORDER BY resolved_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM messages m
USING doomed
WHERE m.id = doomed.id;

-- name: partitions_before
-- The partitions of a table whose whole day is before first_kept (a
-- partition's name, e.g. messages_20260101): names sort by day.
SELECT c.relname AS partition
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = %(parent)s::regclass
  AND c.relname < %(first_kept)s
ORDER BY c.relname;

-- name: delete_partition_deliveries
-- Deliveries are not partitioned: those of a day's messages go first, by
-- the partition's own primary key index. {partition} is an identifier.
DELETE FROM deliveries d
USING {partition} p
WHERE d.message_offset = p.id;

-- name: detach_partition
-- CONCURRENTLY: the hot path's statements keep running on the parent
-- (it takes SHARE UPDATE EXCLUSIVE, not ACCESS EXCLUSIVE).
ALTER TABLE {parent} DETACH PARTITION {partition} CONCURRENTLY;

-- name: drop_table
DROP TABLE {table};

-- name: sizes
-- Bytes of each table with its partitions, its indexes and TOAST.
SELECT t.name,
       sum(pg_relation_size(p.relid))::bigint AS heap_bytes,
       sum(pg_indexes_size(p.relid))::bigint AS index_bytes,
       sum(pg_total_relation_size(p.relid))::bigint AS total_bytes
FROM unnest(%(tables)s::text[]) AS t (name)
-- pg_partition_tree lists nothing for a table that is not partitioned.
CROSS JOIN LATERAL (
    SELECT relid FROM pg_partition_tree(t.name::regclass) WHERE isleaf
    UNION
    SELECT t.name::regclass
) AS p
GROUP BY t.name
ORDER BY t.name;
