-- The figures bench/steady.py reads every window: what the tables the
-- retention job keeps to size hold and take on disk.

-- name: table_figures
-- Rows (exact) and bytes (with indexes, TOAST and any partitions) of each table.
WITH counted (name, row_count) AS (
    SELECT 'messages', count(*) FROM messages
    UNION ALL SELECT 'message_history', count(*) FROM message_history
    UNION ALL SELECT 'deliveries', count(*) FROM deliveries
    UNION ALL SELECT 'dead_letters', count(*) FROM dead_letters
    UNION ALL SELECT 'check_requests', count(*) FROM check_requests
)
SELECT c.name,
       c.row_count,
       (SELECT sum(pg_total_relation_size(p.relid))::bigint
        FROM (
            -- pg_partition_tree lists nothing for a table that is not partitioned.
            SELECT relid FROM pg_partition_tree(c.name::regclass) WHERE isleaf
            UNION
            SELECT c.name::regclass
        ) AS p) AS total_bytes
FROM counted AS c
ORDER BY c.name;

-- name: postmaster
-- The server's process (the parent of this backend), to check that it stopped.
SELECT pg_backend_pid() AS backend;

-- name: scale_autovacuum
-- The run compresses time: rows live a minute instead of days. Autovacuum
-- must come as often, relative to that lifetime, as it does in real use or
-- the run mostly measures dead tuples awaiting their first pass.
ALTER SYSTEM SET autovacuum_naptime = {seconds};

-- name: reload_configuration
SELECT pg_reload_conf();

-- name: autovacuum_naptime
SELECT setting::int FROM pg_settings WHERE name = 'autovacuum_naptime';
