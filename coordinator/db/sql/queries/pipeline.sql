-- Data pipeline: what the Spark jobs read, the archive's selection,
-- checksums and deletes, and the report's figures as one SQL aggregate.
-- The Spark side reads these through the coordinator_postgres data source,
-- which splits them into id ranges: they take no ORDER BY.

-- name: pipeline_report_messages
-- returns: id, producer_group, topic, state, check_count, born_at, resolved_at
-- The lifecycle report's input: one row per half message.
SELECT id, producer_group, topic, state, check_count, born_at, resolved_at
FROM messages
WHERE kind = 'transactional';

-- name: pipeline_report_messages_born_in
-- returns: id, producer_group, topic, state, check_count, born_at, resolved_at
-- The report's input born within the given [start, end) ranges (disjoint; PostgreSQL
-- array literals of timestamptz, 'infinity' for no end): the hours an incremental report
-- reads again. Each range is a range scan of ix_messages_born_at.
SELECT m.id, m.producer_group, m.topic, m.state, m.check_count, m.born_at, m.resolved_at
FROM unnest(%(starts)s::text::timestamptz[], %(ends)s::text::timestamptz[]) AS r (low, high)
JOIN messages m ON m.born_at >= r.low AND m.born_at < r.high
WHERE m.kind = 'transactional';

-- name: pipeline_report_unsettled_hours
-- returns: hour
-- Hours of birth (UTC) whose figures may have changed since a report's previous run:
-- those with a prepared message (an index scan of ix_messages_due_for_check), and those
-- with a message resolved in [since, until) (of ix_messages_resolved_at): an operator
-- resolved a discarded message there, or re-armed one that ended again.
SELECT DISTINCT date_trunc('hour', born_at AT TIME ZONE 'UTC') AS hour
FROM messages
WHERE kind = 'transactional'
  AND (state = 'prepared'
       OR (resolved_at >= %(since)s::timestamptz AND resolved_at < %(until)s::timestamptz));

-- name: pipeline_database_identity
-- returns: identity
-- Which database this is, for state kept between runs: the cluster's system
-- identifier, and the database's name and oid (a recreated database gets a new one).
SELECT (SELECT system_identifier FROM pg_control_system())::text || '/' || d.oid::text
       || '/' || d.datname AS identity
FROM pg_database d
WHERE d.datname = current_database();

-- name: pipeline_consumer_lag
-- returns: consumer_group, topic, lag, in_flight, dead_letters, oldest_pending_at
SELECT consumer_group, topic, lag, in_flight, dead_letters, oldest_pending_at
FROM consumer_lag;

-- name: pipeline_relation_exists
-- returns: present
SELECT to_regclass(%(name)s::text) IS NOT NULL AS present;

-- name: pipeline_archive_plan
-- returns: cutoff, max_id
-- A run's frozen bounds: the cutoff and the newest offset it may consider.
SELECT now() - make_interval(secs => %(older_than_seconds)s::float8) AS cutoff,
       coalesce(max(id), 0) AS max_id
FROM messages;

-- name: pipeline_archive_messages
-- returns: id, message_id, transaction_id, kind, producer_group, tags, keys, message_group, body,
-- returns: properties, state, check_count, check_immunity_seconds, born_at, next_check_at,
-- returns: resolved_at, resolution_source, deliver_at, trace_context, born_date, topic
-- Archivable (the view archivable_messages: resolved, nothing left to
-- deliver) and resolved before the run's cutoff. Every archive query below
-- reads the same view with the same bounds, so they select the same messages.
SELECT m.id, m.message_id, m.transaction_id, m.kind, m.producer_group, m.tags, m.keys,
       m.message_group, m.body, m.properties::text AS properties, m.state, m.check_count,
       extract(epoch FROM m.check_immunity)::float8 AS check_immunity_seconds,
       m.born_at, m.next_check_at, m.resolved_at, m.resolution_source, m.deliver_at,
       m.trace_context, (m.born_at AT TIME ZONE 'UTC')::date AS born_date, m.topic
FROM archivable_messages m
WHERE m.resolved_at < %(cutoff)s::timestamptz
  AND m.id <= %(max_id)s::bigint;

-- name: pipeline_archive_history
-- returns: id, message_offset, at, source, from_state, to_state, detail, born_date, topic
-- The history of exactly the messages pipeline_archive_messages selects,
-- placed in their message's date and topic partition.
SELECT h.id, h.message_offset, h.at, h.source, h.from_state, h.to_state, h.detail,
       (m.born_at AT TIME ZONE 'UTC')::date AS born_date, m.topic
FROM message_history h
JOIN archivable_messages m ON m.id = h.message_offset
WHERE m.resolved_at < %(cutoff)s::timestamptz
  AND m.id <= %(max_id)s::bigint;

-- name: pipeline_archive_message_checksums
-- returns: born_date, topic, rows, checksum
-- Per date and topic: rows and the sum of a 60-bit row fingerprint (sha256
-- of every column as text). coordinator/pipeline/checksums.py computes the
-- same fingerprint over the Parquet copy; the two must agree exactly.
-- Columns added to messages later (deliver_at, trace_context) enter as
-- 'name=value', left out when NULL (concat_ws skips NULLs): a row without
-- them has the fingerprint it had before they existed.
SELECT (m.born_at AT TIME ZONE 'UTC')::date AS born_date, m.topic, count(*) AS rows,
       sum(('x' || substr(encode(sha256(convert_to(concat_ws('|',
           m.id::text, m.message_id, coalesce(m.transaction_id, '\N'), m.kind,
           coalesce(m.producer_group, '\N'), m.topic, coalesce(m.tags, '\N'),
           array_to_string(m.keys, ','), coalesce(m.message_group, '\N'),
           encode(sha256(m.body), 'hex'), m.properties::text, m.state, m.check_count::text,
           coalesce(((extract(epoch FROM m.check_immunity) * 1000000)::bigint)::text, '\N'),
           ((extract(epoch FROM m.born_at) * 1000000)::bigint)::text,
           coalesce(((extract(epoch FROM m.next_check_at) * 1000000)::bigint)::text, '\N'),
           coalesce(((extract(epoch FROM m.resolved_at) * 1000000)::bigint)::text, '\N'),
           coalesce(m.resolution_source, '\N'),
           'deliver_at=' || ((extract(epoch FROM m.deliver_at) * 1000000)::bigint)::text,
           'trace_context=' || m.trace_context
       ), 'UTF8')), 'hex'), 1, 15))::bit(60)::bigint) AS checksum
FROM archivable_messages m
WHERE m.resolved_at < %(cutoff)s::timestamptz
  AND m.id <= %(max_id)s::bigint
GROUP BY 1, 2;

-- name: pipeline_archive_history_checksums
-- returns: born_date, topic, rows, checksum
SELECT (m.born_at AT TIME ZONE 'UTC')::date AS born_date, m.topic, count(*) AS rows,
       sum(('x' || substr(encode(sha256(convert_to(concat_ws('|',
           h.id::text, h.message_offset::text,
           ((extract(epoch FROM h.at) * 1000000)::bigint)::text, h.source,
           coalesce(h.from_state, '\N'), h.to_state, coalesce(h.detail, '\N')
       ), 'UTF8')), 'hex'), 1, 15))::bit(60)::bigint) AS checksum
FROM message_history h
JOIN archivable_messages m ON m.id = h.message_offset
WHERE m.resolved_at < %(cutoff)s::timestamptz
  AND m.id <= %(max_id)s::bigint
GROUP BY 1, 2;

-- name: pipeline_archive_delete
-- returns: id
-- One batch of archived messages; their history goes with them (trigger
-- messages_deleted). The conditions of archivable_messages are checked again,
-- written out on the deleted row itself: an operator may have re-armed a
-- message (prepared again) since the run read it, and only a condition on
-- the target row is re-checked against its newest version before deleting.
DELETE FROM messages m
WHERE m.id = ANY(%(ids)s::bigint[])
  AND m.state <> 'prepared'
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_offset = m.id)
  AND NOT EXISTS (SELECT 1 FROM dead_letters l WHERE l.message_offset = m.id)
RETURNING m.id;

-- name: pipeline_archive_still_present
-- returns: id
SELECT id FROM messages WHERE id = ANY(%(ids)s::bigint[]);

-- name: pipeline_archive_lock
-- returns: locked
-- One archive run per database at a time (session-level advisory lock).
SELECT pg_try_advisory_lock(hashtextextended('coordinator pipeline archive', 7)) AS locked;

-- name: pipeline_archive_unlock
-- returns: unlocked
SELECT pg_advisory_unlock(hashtextextended('coordinator pipeline archive', 7)) AS unlocked;

-- name: pipeline_audit_messages
-- returns: id, message_id, transaction_id, producer_group, topic, state, properties, born_at,
-- returns: resolved_at
SELECT id, message_id, transaction_id, producer_group, topic, state, properties::text AS properties,
       born_at, resolved_at
FROM messages
WHERE kind = 'transactional';

-- name: pipeline_generate_synthetic
-- Test data for the pipeline's tests, benchmark and demos (coordinator/pipeline/synthetic.py):
-- messages first+0 .. last with their history, following the coordinator's rules.
WITH randoms AS (
    -- independent uniform numbers in [0, 1) per message, from hashes of its number
    SELECT i,
           (hashint8extended(i, %(seed)s::bigint) & 2147483647) / 2147483648.0 AS r_group,
           (hashint8extended(i, %(seed)s::bigint + 1) & 2147483647) / 2147483648.0 AS r_topic,
           (hashint8extended(i, %(seed)s::bigint + 2) & 2147483647) / 2147483648.0 AS r_state,
           (hashint8extended(i, %(seed)s::bigint + 3) & 2147483647) / 2147483648.0 AS r_born,
           (hashint8extended(i, %(seed)s::bigint + 4) & 2147483647) / 2147483648.0 AS r_checks,
           (hashint8extended(i, %(seed)s::bigint + 5) & 2147483647) / 2147483648.0 AS r_latency
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i
),
shaped AS (
    SELECT i, r_latency,
           'group-' || floor(r_group * %(groups)s)::int AS producer_group,
           'topic-' || floor(r_topic * %(topics)s)::int AS topic,
           CASE WHEN r_state < 0.80 THEN 'committed'
                WHEN r_state < 0.88 THEN 'rolled_back'
                WHEN r_state < 0.92 THEN 'discarded'
                WHEN r_state < 0.95 THEN 'expired'
                ELSE 'prepared' END AS state,
           %(anchor)s::timestamptz
               - make_interval(secs => r_born * %(span_hours)s::float8 * 3600) AS born_at,
           r_checks
    FROM randoms
),
timed AS (
    SELECT *,
           CASE WHEN state = 'discarded' THEN %(check_max)s::int
                WHEN state IN ('expired', 'prepared') THEN floor(r_checks * 3)::int
                WHEN r_checks < 0.66 THEN 0
                ELSE 1 + floor((r_checks - 0.66) / 0.34 * 4)::int END AS check_count
    FROM shaped
),
resolved AS (
    SELECT *,
           CASE WHEN state = 'prepared' THEN NULL
                WHEN state = 'expired' THEN 'expiry'
                WHEN state = 'discarded' THEN 'discard'
                WHEN check_count = 0 THEN 'client'
                ELSE 'check' END AS resolution_source,
           CASE WHEN state = 'prepared' THEN NULL
                WHEN state = 'expired'
                    THEN born_at + make_interval(hours => 72, secs => r_latency * 60)
                WHEN check_count = 0 THEN born_at + make_interval(secs => 0.05 + r_latency * 3)
                ELSE born_at + make_interval(secs => 6 + 60 * (check_count - 1) + r_latency * 5)
           END AS resolved_at
    FROM timed
),
inserted AS (
    INSERT INTO messages (
        message_id, transaction_id, kind, producer_group, topic, tags, keys, body,
        properties, state, check_count, born_at, next_check_at, resolved_at, resolution_source
    )
    SELECT 'SYN-' || %(seed)s::text || '-' || i, 'tx-' || %(seed)s::text || '-' || i,
           'transactional', producer_group, topic, 'synthetic', ARRAY['order-' || i],
           convert_to('synthetic message ' || i, 'UTF8'),
           jsonb_build_object('order_id', i::text), state, check_count, born_at,
           CASE WHEN state = 'prepared' THEN %(anchor)s::timestamptz + interval '60 seconds' END,
           resolved_at, resolution_source
    FROM resolved
    ORDER BY i
    RETURNING id, state, born_at, resolved_at, resolution_source
)
INSERT INTO message_history (message_offset, at, source, from_state, to_state)
SELECT id, born_at, 'client', NULL, 'prepared' FROM inserted
UNION ALL
SELECT id, resolved_at, resolution_source, 'prepared', state
FROM inserted WHERE state <> 'prepared';
