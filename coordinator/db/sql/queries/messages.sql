-- Storing messages (prepare and send) and reading them back: lookups,
-- history, counts and the oldest pending transaction.
--
-- The batch statements take one array per column, sent in binary (%(name)b):
-- psycopg dumps a 200-element array about three times faster in binary than
-- as text, and bytea needs no hex escaping.

-- name: insert_messages
-- Stores a batch of messages (half or normal) in one statement. A message id
-- that is already stored is skipped here (idempotent retry); the caller reads
-- those back with find_messages_by_message_id.
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
        %(immunity_seconds)b::float8[]
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
