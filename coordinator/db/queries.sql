-- The coordinator's SQL, one named query per block. Every state change is a
-- compare-and-set inside a single statement, and the history row of the
-- change is written by the same statement, so a change and its record can
-- never be separated.

-- name: insert_messages
-- Stores a batch of messages (half or normal) in one statement. A message id
-- that is already stored is skipped here (idempotent retry); the caller reads
-- those back with find_messages_by_message_id.
WITH incoming AS (
    SELECT *
    FROM unnest(
        %(message_ids)s::text[],
        %(transaction_ids)s::text[],
        %(producer_groups)s::text[],
        %(topics)s::text[],
        %(tags)s::text[],
        %(keys)s::text[],
        %(message_groups)s::text[],
        %(bodies)s::bytea[],
        %(properties)s::jsonb[],
        %(immunity_seconds)s::float8[]
    ) WITH ORDINALITY AS i (
        message_id, transaction_id, producer_group, topic, tags, keys,
        message_group, body, properties, immunity_seconds, position
    )
),
inserted AS (
    INSERT INTO messages (
        message_id, transaction_id, kind, producer_group, topic, tags, keys,
        message_group, body, properties, state, check_immunity, next_check_at,
        resolved_at, resolution_source
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
        CASE WHEN %(state)s::text = 'prepared' THEN NULL ELSE 'client' END
    FROM incoming
    ORDER BY position
    ON CONFLICT (message_id) DO NOTHING
    RETURNING id, message_id, transaction_id, state
),
recorded AS (
    INSERT INTO message_history (message_offset, source, from_state, to_state)
    SELECT id, 'client', NULL, state FROM inserted
)
SELECT id, message_id, transaction_id, state FROM inserted;

-- name: find_messages_by_message_id
-- The stored messages behind an idempotent retry, with what it takes to tell
-- a true retry from a reuse of the id for a different message.
SELECT id, message_id, transaction_id, state, kind, producer_group, topic,
       sha256(body) AS body_sha256
FROM messages
WHERE message_id = ANY(%(message_ids)s::text[]);

-- name: end_transaction
-- Commit or roll back one half message: compare-and-set from 'prepared',
-- guarded by the producer group (and the message id when the caller gives
-- one). Returns the row as it was before, and the new state if it changed.
WITH target AS (
    SELECT id, message_id, transaction_id, producer_group, state
    FROM messages
    WHERE transaction_id = %(transaction_id)s::text
    FOR UPDATE
),
changed AS (
    UPDATE messages AS m
    SET state = %(to_state)s::text,
        resolved_at = now(),
        resolution_source = %(source)s::text,
        next_check_at = NULL
    FROM target
    WHERE m.id = target.id
      AND target.state = 'prepared'
      AND target.producer_group = %(producer_group)s::text
      AND (%(message_id)s::text IS NULL OR target.message_id = %(message_id)s::text)
    RETURNING m.id, m.state
),
recorded AS (
    INSERT INTO message_history (message_offset, source, from_state, to_state, detail)
    SELECT id, %(source)s::text, 'prepared', state, %(detail)s::text FROM changed
)
SELECT target.id, target.message_id, target.transaction_id, target.producer_group,
       target.state AS previous_state, changed.state AS new_state
FROM target
LEFT JOIN changed ON changed.id = target.id;

-- name: get_transaction
-- The fields an UNKNOWN answer is validated against.
SELECT id, message_id, transaction_id, producer_group, state
FROM messages
WHERE transaction_id = %(transaction_id)s::text;

-- name: get_message_by_offset
SELECT * FROM messages WHERE id = %(offset)s::bigint;

-- name: get_message_by_message_id
SELECT * FROM messages WHERE message_id = %(message_id)s::text;

-- name: get_message_by_transaction_id
SELECT * FROM messages WHERE transaction_id = %(transaction_id)s::text;

-- name: get_history
SELECT at, source, from_state, to_state, detail
FROM message_history
WHERE message_offset = %(offset)s::bigint
ORDER BY id;

-- name: message_counts
SELECT producer_group, topic, state, messages, oldest_born_at
FROM message_counts
ORDER BY producer_group NULLS FIRST, topic, state;

-- name: oldest_pending
SELECT message_offset, message_id, transaction_id, producer_group, topic, age,
       check_count, next_check_at,
       count(*) OVER () AS pending_total
FROM pending_transactions
ORDER BY born_at, message_offset
LIMIT 1;
