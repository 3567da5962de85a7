-- Ending transactions: commit, rollback or unknown, from the producer or a
-- check-back answer.
--
-- Every state change is a compare-and-set inside a single statement, and the
-- history row of the change is written by the same statement, so a change and
-- its record can never be separated.
--
-- The batch statements take one array per column, sent in binary (%(name)b):
-- psycopg dumps a 200-element array about three times faster in binary than
-- as text, and bytea needs no hex escaping.

-- name: end_transactions
-- returns: position, id, message_id, transaction_id, producer_group, previous_state, new_state,
-- returns: age_seconds
-- Commit or roll back a batch of half messages (one request per transaction
-- id): compare-and-set from 'prepared', guarded by the producer group and
-- the message id when the caller gives one. Rows are locked in id order so
-- concurrent batches cannot deadlock. Returns, per request in order, the row
-- as it was before, the new state if this statement changed it, and the
-- message's age (its prepare-to-resolution time when it changed).
-- A repeat changes no row but still locks it, and a row lock writes WAL: so
-- with a synchronous standby a repeat, too, is answered only once the standby
-- has everything up to here, the first attempt's local-only commit included.
WITH request AS (
    SELECT *
    FROM unnest(
        %(transaction_ids)b::text[],
        %(producer_groups)b::text[],
        %(message_ids)b::text[],
        %(to_states)b::text[],
        %(sources)b::text[]
    ) WITH ORDINALITY AS r (
        transaction_id, producer_group, message_id, to_state, source, position
    )
),
target AS (
    SELECT m.id, m.message_id, m.transaction_id, m.producer_group, m.state, m.born_at,
           r.position, r.to_state, r.source,
           m.state = 'prepared'
               AND m.producer_group = r.producer_group
               AND (r.message_id IS NULL OR m.message_id = r.message_id) AS allowed
    FROM request AS r
    JOIN messages AS m ON m.transaction_id = r.transaction_id
    ORDER BY m.id
    FOR UPDATE OF m
),
changed AS (
    UPDATE messages AS m
    SET state = target.to_state,
        resolved_at = now(),
        resolution_source = target.source,
        next_check_at = NULL
    FROM target
    WHERE m.id = target.id AND target.allowed
    RETURNING m.id, m.state
),
recorded AS (
    INSERT INTO message_history (message_offset, source, from_state, to_state)
    SELECT changed.id, target.source, 'prepared', changed.state
    FROM changed
    JOIN target ON target.id = changed.id
)
SELECT request.position, target.id, target.message_id, target.transaction_id,
       target.producer_group, target.state AS previous_state, changed.state AS new_state,
       -- prepare to resolution, on the database's clock (resolved_at is now() too)
       extract(epoch FROM now() - target.born_at)::float8 AS age_seconds
FROM request
LEFT JOIN target ON target.position = request.position
LEFT JOIN changed ON changed.id = target.id
ORDER BY request.position;
