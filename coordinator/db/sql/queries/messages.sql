-- Storing messages (prepare and send) and reading them back: lookups,
-- history, counts and the oldest pending transaction.
--
-- The batch statements take one array per column, sent in binary (%(name)b):
-- psycopg dumps a 200-element array about three times faster in binary than
-- as text, and bytea needs no hex escaping.

-- name: insert_messages
-- returns: id, message_id, transaction_id, state, producer_group, topic
-- Stores a batch of messages (half or normal) in one statement. A message id
-- that is already stored in the message's producer group (or, without a
-- group, its topic) is skipped here (idempotent retry); the caller reads
-- those back with find_messages_by_message_id. No conflict target: the two
-- partial unique indexes on message_id are both arbiters (the other unique
-- columns are minted by the coordinator and never collide).
WITH incoming AS (
    SELECT *
    FROM unnest(
        %(message_ids)b::text[],
        %(transaction_ids)b::text[],
        %(producer_groups)b::text[],
        %(topics)b::text[],
        %(tags)b::text[],
        %(keys)b::text[],
        %(message_groups)b::text[],
        %(bodies)b::bytea[],
        %(properties)b::jsonb[],
        %(immunity_seconds)b::float8[],
        %(deliver_at)b::timestamptz[],
        %(trace_contexts)b::text[]
    ) WITH ORDINALITY AS i (
        message_id, transaction_id, producer_group, topic, tags, keys,
        message_group, body, properties, immunity_seconds, deliver_at, trace_context, position
    )
),
inserted AS (
    INSERT INTO messages (
        message_id, transaction_id, kind, producer_group, topic, tags, keys,
        message_group, body, properties, state, check_immunity, next_check_at,
        resolved_at, resolution_source, deliver_at, trace_context
    )
    SELECT
        message_id, transaction_id, %(kind)s::text, producer_group, topic, tags,
        string_to_array(keys, ' '), message_group, body, properties, %(state)s::text,
        make_interval(secs => immunity_seconds),
        -- first check-back: transaction timeout after birth, or the message's own immunity
        CASE WHEN %(state)s::text = 'prepared'
             THEN now() + make_interval(secs => coalesce(immunity_seconds, %(transaction_timeout_seconds)s::float8))
        END,
        CASE WHEN %(state)s::text = 'prepared' THEN NULL ELSE now() END,
        CASE WHEN %(state)s::text = 'prepared' THEN NULL ELSE 'client' END,
        deliver_at, trace_context
    FROM incoming
    ORDER BY position
    ON CONFLICT DO NOTHING
    RETURNING id, message_id, transaction_id, state, producer_group, topic
),
recorded AS (
    INSERT INTO message_history (message_offset, source, from_state, to_state)
    SELECT id, 'client', NULL, state FROM inserted
)
SELECT id, message_id, transaction_id, state, producer_group, topic FROM inserted;

-- name: find_messages_by_message_id
-- returns: id, message_id, transaction_id, state, kind, producer_group, topic, body_sha256
-- The stored messages behind an idempotent retry, with what it takes to tell
-- a true retry from a reuse of the id for a different message: each id looked
-- up where it is unique, in its producer group or (without one) its topic.
-- Two halves, each stating the predicate of the partial index it reads.
WITH wanted AS (
    SELECT *
    FROM unnest(
        %(message_ids)s::text[], %(producer_groups)s::text[], %(topics)s::text[]
    ) AS w (message_id, producer_group, topic)
)
SELECT m.id, m.message_id, m.transaction_id, m.state, m.kind, m.producer_group, m.topic,
       sha256(m.body) AS body_sha256
FROM wanted AS w
JOIN messages AS m ON m.message_id = w.message_id AND m.producer_group = w.producer_group
WHERE m.producer_group IS NOT NULL
UNION ALL
SELECT m.id, m.message_id, m.transaction_id, m.state, m.kind, m.producer_group, m.topic,
       sha256(m.body) AS body_sha256
FROM wanted AS w
JOIN messages AS m ON m.message_id = w.message_id AND m.topic = w.topic
WHERE w.producer_group IS NULL AND m.producer_group IS NULL;

-- name: get_transaction
-- returns: id, message_id, transaction_id, producer_group, state
-- The fields an UNKNOWN answer is validated against.
SELECT id, message_id, transaction_id, producer_group, state
FROM messages
WHERE transaction_id = %(transaction_id)s::text;

-- name: get_message_by_offset
-- returns: id, message_id, transaction_id, kind, producer_group, topic, tags, keys, message_group,
-- returns: body, properties, state, check_count, check_immunity, born_at, next_check_at,
-- returns: resolved_at, resolution_source, deliver_at, trace_context
SELECT * FROM messages WHERE id = %(offset)s::bigint;

-- name: find_message_id_owners
-- returns: id, producer_group, topic
-- Where a message id is used: each message with it, in offset order,
-- optionally in one producer group or topic only (three narrow columns: one
-- row per group or topic that used the id). The caller keeps those it may
-- see, then reads the one it wants by offset. Two halves, each stating the
-- predicate of the partial index it reads.
SELECT id, producer_group, topic
FROM (
    SELECT id, producer_group, topic
    FROM messages
    WHERE message_id = %(message_id)s::text
      AND producer_group IS NOT NULL
    UNION ALL
    SELECT id, producer_group, topic
    FROM messages
    WHERE message_id = %(message_id)s::text
      AND producer_group IS NULL
) AS used
WHERE (%(producer_group)s::text IS NULL OR producer_group = %(producer_group)s::text)
  AND (%(topic)s::text IS NULL OR topic = %(topic)s::text)
ORDER BY id;

-- name: get_message_by_transaction_id
-- returns: id, message_id, transaction_id, kind, producer_group, topic, tags, keys, message_group,
-- returns: body, properties, state, check_count, check_immunity, born_at, next_check_at,
-- returns: resolved_at, resolution_source, deliver_at, trace_context
SELECT * FROM messages WHERE transaction_id = %(transaction_id)s::text;

-- name: get_history
-- returns: at, source, from_state, to_state, detail
SELECT at, source, from_state, to_state, detail
FROM message_history
WHERE message_offset = %(offset)s::bigint
ORDER BY id;

-- name: message_counts
-- returns: producer_group, topic, state, messages, oldest_born_at
SELECT producer_group, topic, state, messages, oldest_born_at
FROM message_counts
ORDER BY producer_group NULLS FIRST, topic, state;

-- name: oldest_pending
-- returns: message_offset, message_id, transaction_id, producer_group, topic, age, check_count,
-- returns: next_check_at, pending_total
SELECT message_offset, message_id, transaction_id, producer_group, topic, age,
       check_count, next_check_at,
       count(*) OVER () AS pending_total
FROM pending_transactions
ORDER BY born_at, message_offset
LIMIT 1;

-- name: lock_recall_target
-- returns: id, message_id, topic, state, deliver_at, recalled
-- A recall's first step: the message, locked against its commit and
-- against another recall, and whether it was recalled before.
SELECT m.id, m.message_id, m.topic, m.state, m.deliver_at,
       EXISTS (
           SELECT 1 FROM message_history h
           WHERE h.message_offset = m.id AND h.detail = 'recalled'
       ) AS recalled
FROM messages m
WHERE m.id = %(offset)s::bigint
FOR UPDATE OF m;

-- name: lock_recall_deliveries
-- returns: received, ahead
-- The second: its deliveries, locked in id order (waiting for a receive
-- that holds one). clock_timestamp() is read after the locks: a receive
-- that claimed one before them began before this time, so while the
-- delivery time is still ahead of it, none was received, and none can be
-- while the locks are held.
WITH locked AS (
    SELECT d.id, d.attempts
    FROM deliveries d
    WHERE d.message_offset = %(offset)s::bigint
    ORDER BY d.id
    FOR UPDATE OF d
)
SELECT (SELECT count(*) FROM locked WHERE attempts > 0) AS received,
       %(deliver_at)s::timestamptz > clock_timestamp() AS ahead;

-- name: recall_message
-- The third, once the two above allow it: the deliveries go and the recall
-- is written in the message's history.
WITH gone AS (
    DELETE FROM deliveries WHERE message_offset = %(offset)s::bigint
)
INSERT INTO message_history (message_offset, source, from_state, to_state, detail)
VALUES (%(offset)s::bigint, 'client', 'committed', 'committed', 'recalled');
