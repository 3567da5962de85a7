-- The coordinator's SQL, one named query per block. Every state change is a
-- compare-and-set inside a single statement, and the history row of the
-- change is written by the same statement, so a change and its record can
-- never be separated.
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

-- name: end_transactions
-- Commit or roll back a batch of half messages (one request per transaction
-- id): compare-and-set from 'prepared', guarded by the producer group and
-- the message id when the caller gives one. Rows are locked in id order so
-- concurrent batches cannot deadlock. Returns, per request in order, the row
-- as it was before and the new state if this statement changed it.
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
    SELECT m.id, m.message_id, m.transaction_id, m.producer_group, m.state,
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
       target.producer_group, target.state AS previous_state, changed.state AS new_state
FROM request
LEFT JOIN target ON target.position = request.position
LEFT JOIN changed ON changed.id = target.id
ORDER BY request.position;

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

-- ---------------------------------------------------------------------------
-- Delivery (issue 4): subscriptions, receive, ack, invisible duration, dead
-- letters, lag. Deliveries are created by the trigger on messages (migrations
-- 0003, 0004), in the transaction that commits a message.

-- name: upsert_subscription
-- xmax = 0 only for a freshly inserted row: tells "created" from "changed".
INSERT INTO subscriptions (consumer_group, topic, expression, tags, fifo, max_delivery_attempts)
VALUES (
    %(consumer_group)s::text, %(topic)s::text, %(expression)s::text, %(tags)s::text[],
    %(fifo)s::boolean, %(max_delivery_attempts)s::integer
)
ON CONFLICT (consumer_group, topic) DO UPDATE
SET expression = EXCLUDED.expression,
    tags = EXCLUDED.tags,
    fifo = EXCLUDED.fifo,
    max_delivery_attempts = EXCLUDED.max_delivery_attempts
RETURNING consumer_group, topic, expression, tags, fifo, max_delivery_attempts, created_at,
          (xmax = 0) AS created;

-- name: delete_subscription
-- Its pending deliveries go with it (trigger subscriptions_deleted); dead
-- letters stay.
DELETE FROM subscriptions
WHERE consumer_group = %(consumer_group)s::text AND topic = %(topic)s::text
RETURNING consumer_group, topic, expression, tags, fifo, max_delivery_attempts, created_at;

-- name: list_subscriptions
SELECT consumer_group, topic, expression, tags, fifo, max_delivery_attempts, created_at
FROM subscriptions
WHERE %(consumer_group)s::text IS NULL OR consumer_group = %(consumer_group)s::text
ORDER BY consumer_group, topic;

-- name: count_subscriptions
SELECT count(*) AS subscriptions
FROM subscriptions
WHERE consumer_group = %(consumer_group)s::text
  AND (%(topic)s::text IS NULL OR topic = %(topic)s::text);

-- name: claim_deliveries
-- Claims up to max_messages available deliveries of a group, oldest first.
-- SKIP LOCKED: concurrent receivers of one group pass over each other's rows,
-- so no message is in flight with two consumers. FIFO subscriptions hand out
-- only the oldest unacked delivery of each message group (an in-flight one
-- blocks the rest of its group). A delivery whose attempts reached the
-- subscription's max_delivery_attempts moves to dead_letters instead.
-- Returns the claimed rows (dead_lettered = false) and the buried ones (true).
WITH due AS (
    SELECT d.id, d.attempts >= s.max_delivery_attempts AS exhausted
    FROM deliveries d
    JOIN subscriptions s ON s.consumer_group = d.consumer_group AND s.topic = d.topic
    WHERE d.consumer_group = %(consumer_group)s::text
      AND (%(topic)s::text IS NULL OR d.topic = %(topic)s::text)
      AND d.visible_at <= now()
      AND (
          NOT s.fifo
          OR d.message_group IS NULL
          OR NOT EXISTS (
              SELECT 1
              FROM deliveries earlier
              WHERE earlier.consumer_group = d.consumer_group
                AND earlier.topic = d.topic
                AND earlier.message_group = d.message_group
                AND earlier.id < d.id
          )
      )
    ORDER BY d.id
    LIMIT %(max_messages)s::integer
    FOR UPDATE OF d SKIP LOCKED
),
buried AS (
    DELETE FROM deliveries d
    USING due
    WHERE d.id = due.id AND due.exhausted
    RETURNING d.id, d.message_offset, d.consumer_group, d.topic, d.attempts, d.committed_at,
              d.visible_at, d.receipt_handle
),
dead AS (
    INSERT INTO dead_letters (message_offset, consumer_group, topic, attempts, committed_at)
    SELECT message_offset, consumer_group, topic, attempts, committed_at
    FROM buried
    ORDER BY id
    ON CONFLICT (message_offset, consumer_group) DO NOTHING
),
claimed AS (
    UPDATE deliveries d
    SET attempts = d.attempts + 1,
        visible_at = now() + make_interval(secs => %(invisible_seconds)s::float8),
        receipt_handle = d.id::text || '.' || replace(gen_random_uuid()::text, '-', '')
    FROM due
    WHERE d.id = due.id AND NOT due.exhausted
    RETURNING d.id, d.message_offset, d.consumer_group, d.topic, d.attempts, d.committed_at,
              d.visible_at, d.receipt_handle
),
outcome AS (
    SELECT *, false AS dead_lettered FROM claimed
    UNION ALL
    SELECT *, true AS dead_lettered FROM buried
)
SELECT o.dead_lettered, o.receipt_handle, o.attempts, o.visible_at, o.committed_at,
       o.consumer_group, m.id AS message_offset, m.message_id, m.transaction_id,
       m.producer_group, m.topic, m.tags, m.keys, m.message_group, m.properties, m.body,
       m.born_at
FROM outcome o
JOIN messages m ON m.id = o.message_offset
ORDER BY o.id;

-- name: ack_deliveries
-- Acks by receipt handle: deletes each delivery whose current handle is the
-- one given. Rows are locked in id order so that concurrent acks cannot
-- deadlock. A handle whose delivery still exists with another handle is
-- stale (received again since); one whose delivery is gone is not found.
WITH wanted AS (
    SELECT *
    FROM unnest(%(delivery_ids)s::bigint[], %(receipt_handles)s::text[])
         WITH ORDINALITY AS w (delivery_id, receipt_handle, position)
),
locked AS (
    SELECT d.id
    FROM deliveries d
    JOIN wanted w ON w.delivery_id = d.id AND w.receipt_handle = d.receipt_handle
    WHERE d.consumer_group = %(consumer_group)s::text
    ORDER BY d.id
    FOR UPDATE OF d
),
acked AS (
    DELETE FROM deliveries d
    USING locked
    WHERE d.id = locked.id
    RETURNING d.id, d.receipt_handle, d.topic, d.message_group
)
SELECT w.receipt_handle,
       CASE WHEN acked.id IS NOT NULL THEN 'acked'
            WHEN present.id IS NOT NULL THEN 'stale'
            ELSE 'not_found'
       END AS outcome,
       -- the next message of a FIFO message group is receivable now
       acked.message_group IS NOT NULL AND EXISTS (
           SELECT 1 FROM subscriptions s
           WHERE s.consumer_group = %(consumer_group)s::text AND s.topic = acked.topic AND s.fifo
       ) AS unblocks_message_group
FROM wanted w
LEFT JOIN acked
       ON acked.id = w.delivery_id AND acked.receipt_handle = w.receipt_handle
LEFT JOIN deliveries present
       ON present.id = w.delivery_id AND present.consumer_group = %(consumer_group)s::text
ORDER BY w.position;

-- name: change_invisible_duration
-- Makes an in-flight delivery invisible for invisible_seconds from now and
-- issues a new receipt handle; the old one stops working.
WITH changed AS (
    UPDATE deliveries d
    SET visible_at = now() + make_interval(secs => %(invisible_seconds)s::float8),
        receipt_handle = d.id::text || '.' || replace(gen_random_uuid()::text, '-', '')
    WHERE d.id = %(delivery_id)s::bigint
      AND d.consumer_group = %(consumer_group)s::text
      AND d.receipt_handle = %(receipt_handle)s::text
    RETURNING d.receipt_handle, d.visible_at, d.attempts
)
SELECT EXISTS (
           SELECT 1 FROM deliveries
           WHERE id = %(delivery_id)s::bigint AND consumer_group = %(consumer_group)s::text
       ) AS found,
       changed.receipt_handle, changed.visible_at, changed.attempts
FROM (SELECT 1) AS one
LEFT JOIN changed ON true;

-- name: notify_consumer_group
SELECT pg_notify('coordinator_deliveries', %(consumer_group)s::text);

-- name: list_dead_letters
SELECT x.id, x.consumer_group, x.topic, x.attempts, x.committed_at, x.dead_at,
       m.id AS message_offset, m.message_id, m.transaction_id, m.producer_group, m.tags,
       m.keys, m.message_group, m.properties, m.body, m.born_at
FROM dead_letters x
JOIN messages m ON m.id = x.message_offset
WHERE (%(consumer_group)s::text IS NULL OR x.consumer_group = %(consumer_group)s::text)
  AND (%(topic)s::text IS NULL OR x.topic = %(topic)s::text)
ORDER BY x.id
LIMIT %(limit)s::integer;

-- name: get_dead_letter
SELECT id, consumer_group, topic FROM dead_letters WHERE id = %(id)s::bigint;

-- name: requeue_dead_letters
-- Moves dead letters back to deliveries with a fresh attempt count (only
-- those whose group still subscribes to the topic). Returns the number
-- requeued per consumer group, whose waiting receivers the caller wakes.
WITH chosen AS (
    DELETE FROM dead_letters x
    USING subscriptions s
    WHERE s.consumer_group = x.consumer_group
      AND s.topic = x.topic
      AND (%(id)s::bigint IS NULL OR x.id = %(id)s::bigint)
      AND (%(consumer_group)s::text IS NULL OR x.consumer_group = %(consumer_group)s::text)
      AND (%(topic)s::text IS NULL OR x.topic = %(topic)s::text)
    RETURNING x.id, x.message_offset, x.consumer_group, x.topic, x.committed_at
),
requeued AS (
    INSERT INTO deliveries (message_offset, consumer_group, topic, message_group, committed_at)
    SELECT c.message_offset, c.consumer_group, c.topic, m.message_group, c.committed_at
    FROM chosen c
    JOIN messages m ON m.id = c.message_offset
    ORDER BY c.id
    ON CONFLICT (message_offset, consumer_group) DO NOTHING
    RETURNING consumer_group
)
SELECT consumer_group, count(*) AS requeued
FROM requeued
GROUP BY consumer_group
ORDER BY consumer_group;

-- name: consumer_lag
SELECT consumer_group, topic, lag, in_flight, dead_letters, oldest_pending_at
FROM consumer_lag
WHERE %(consumer_group)s::text IS NULL OR consumer_group = %(consumer_group)s::text
ORDER BY consumer_group, topic;

-- ============================================================================
-- Check-back engine (issue 3): producer registry, the check claim, pull and
-- push dispatch, operator actions, metrics.
-- ============================================================================

-- name: heartbeat_producer
-- Registers a producer instance or records that it was heard from. An
-- instance that was not live until now (new, or back after its TTL) makes
-- the messages of its group that waited for a live producer due at once.
-- keep_check_url: a long poll refreshes the instance without changing how it
-- registered.
WITH before AS (
    SELECT last_seen_at > now() - make_interval(secs => %(producer_ttl_seconds)s::float8) AS was_live
    FROM producers
    WHERE producer_group = %(producer_group)s::text AND instance_id = %(instance_id)s::text
),
seen AS (
    INSERT INTO producers AS p (producer_group, instance_id, check_url)
    VALUES (%(producer_group)s::text, %(instance_id)s::text, %(check_url)s::text)
    ON CONFLICT (producer_group, instance_id) DO UPDATE
    SET last_seen_at = now(),
        check_url = CASE WHEN %(keep_check_url)s::boolean THEN p.check_url
                         ELSE EXCLUDED.check_url END
    RETURNING p.producer_group, p.instance_id, p.check_url, p.registered_at, p.last_seen_at
),
waiting AS (
    SELECT m.id
    FROM check_requests AS c
    JOIN messages AS m ON m.id = c.message_offset
    WHERE NOT coalesce((SELECT was_live FROM before), false)
      AND c.producer_group = %(producer_group)s::text
      AND c.status = 'no_producer'
      AND m.state = 'prepared'
      AND m.next_check_at > now()
    -- a message being claimed right now needs no wake-up
    FOR UPDATE OF m SKIP LOCKED
),
woken AS (
    UPDATE messages AS m
    SET next_check_at = now()
    FROM waiting
    WHERE m.id = waiting.id
    RETURNING m.id
)
SELECT seen.producer_group, seen.instance_id, seen.check_url, seen.registered_at,
       seen.last_seen_at, true AS live, (SELECT count(*) FROM woken) AS woken
FROM seen;

-- name: remove_producer
DELETE FROM producers
WHERE producer_group = %(producer_group)s::text AND instance_id = %(instance_id)s::text
RETURNING instance_id;

-- name: list_producers
SELECT producer_group, instance_id, check_url, registered_at, last_seen_at,
       last_seen_at > now() - make_interval(secs => %(producer_ttl_seconds)s::float8) AS live
FROM producers
WHERE %(producer_group)s::text IS NULL OR producer_group = %(producer_group)s::text
ORDER BY producer_group, instance_id;

-- name: forget_producers
-- Instances not heard from for a long time leave the registry, so restarts
-- with fresh instance ids do not pile up.
DELETE FROM producers
WHERE last_seen_at < now() - make_interval(secs => %(producer_forget_seconds)s::float8);

-- name: claim_due_checks
-- One check-back round for a batch of due half messages, in one transaction.
-- SKIP LOCKED hands each due message to exactly one coordinator node; its
-- next check time moves forward in the same transaction, so a node that
-- dies after this commit only delays the message to that next check, and a
-- restart never repeats a check early (RocketMQ #2117). Per message:
--   expire   older than retention: `expired` (source expiry)
--   discard  check budget used up: `discarded` (source discard)
--   check    a live instance of its group exists: count the check and
--            address a check request to one instance (rotating over the
--            live instances with the message and its check count)
--   wait     no live instance: the budget is not touched; the attempt is
--            recorded in check_requests (status no_producer)
-- A message resolved in the meantime is not `prepared` and never claimed.
-- Waiting long polls of pulled groups are woken (NOTIFY is sent on commit;
-- repeats in one transaction fold into one).
WITH due AS (
    SELECT id, producer_group, check_count, born_at
    FROM messages
    WHERE state = 'prepared' AND next_check_at <= now()
    ORDER BY next_check_at
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
),
live AS (
    SELECT producer_group, instance_id, check_url,
           row_number() OVER (PARTITION BY producer_group ORDER BY instance_id) - 1 AS slot,
           count(*) OVER (PARTITION BY producer_group) AS instances
    FROM producers
    WHERE last_seen_at > now() - make_interval(secs => %(producer_ttl_seconds)s::float8)
      AND producer_group IN (SELECT producer_group FROM due)
),
planned AS (
    SELECT due.id, due.producer_group, due.check_count, live.instance_id, live.check_url,
           CASE
               WHEN due.born_at <= now() - make_interval(secs => %(retention_seconds)s::float8)
                   THEN 'expire'
               WHEN due.check_count >= %(check_max)s::int THEN 'discard'
               WHEN live.instance_id IS NOT NULL THEN 'check'
               ELSE 'wait'
           END AS action
    FROM due
    LEFT JOIN live
      ON live.producer_group = due.producer_group
     AND live.slot = (due.id + due.check_count) %% live.instances
),
ended AS (
    UPDATE messages AS m
    SET state = CASE planned.action WHEN 'expire' THEN 'expired' ELSE 'discarded' END,
        resolved_at = now(),
        resolution_source = CASE planned.action WHEN 'expire' THEN 'expiry' ELSE 'discard' END,
        next_check_at = NULL
    FROM planned
    WHERE m.id = planned.id
      AND planned.action IN ('expire', 'discard')
      AND m.state = 'prepared'
    RETURNING m.id, m.state, m.resolution_source, m.check_count
),
ended_recorded AS (
    INSERT INTO message_history (message_offset, source, from_state, to_state, detail)
    SELECT id, resolution_source, 'prepared', state,
           CASE state
               WHEN 'expired' THEN %(expiry_detail)s::text
               ELSE 'no resolution after ' || check_count || ' check-backs (check max)'
           END
    FROM ended
),
rescheduled AS (
    UPDATE messages AS m
    SET check_count = m.check_count + CASE planned.action WHEN 'check' THEN 1 ELSE 0 END,
        -- never later than the moment the message expires
        next_check_at = least(
            now() + make_interval(secs => CASE
                WHEN planned.action = 'check' AND %(backoff)s::boolean THEN least(
                    %(check_interval_seconds)s::float8
                        * power(%(backoff_factor)s::float8, least(m.check_count, 64)),
                    %(backoff_max_seconds)s::float8)
                ELSE %(check_interval_seconds)s::float8
            END),
            m.born_at + make_interval(secs => %(retention_seconds)s::float8)
        )
    FROM planned
    WHERE m.id = planned.id
      AND planned.action IN ('check', 'wait')
      AND m.state = 'prepared'
    RETURNING m.id, m.check_count
),
requested AS (
    INSERT INTO check_requests AS c (
        message_offset, producer_group, status, via, instance_id, check_count,
        no_producer_attempts, claimed_at
    )
    SELECT planned.id, planned.producer_group,
           CASE planned.action WHEN 'check' THEN 'pending' ELSE 'no_producer' END,
           CASE WHEN planned.action = 'wait' THEN NULL
                WHEN planned.check_url IS NULL THEN 'pull'
                ELSE 'push' END,
           planned.instance_id,
           rescheduled.check_count,
           CASE planned.action WHEN 'wait' THEN 1 ELSE 0 END,
           now()
    FROM planned
    JOIN rescheduled ON rescheduled.id = planned.id
    -- the message's previous check request is closed by its next one
    ON CONFLICT (message_offset) DO UPDATE
    SET producer_group = EXCLUDED.producer_group,
        status = EXCLUDED.status,
        via = EXCLUDED.via,
        instance_id = EXCLUDED.instance_id,
        check_count = EXCLUDED.check_count,
        no_producer_attempts = c.no_producer_attempts + EXCLUDED.no_producer_attempts,
        claimed_at = EXCLUDED.claimed_at,
        delivered_at = NULL,
        detail = NULL
    RETURNING c.message_offset, c.via
)
SELECT planned.id AS message_offset, planned.action, planned.producer_group,
       planned.instance_id, planned.check_url, requested.via,
       coalesce(rescheduled.check_count, planned.check_count) AS check_count,
       m.message_id, m.transaction_id, m.topic, m.tags, m.keys, m.message_group,
       m.properties, m.born_at,
       CASE WHEN requested.via = 'push' THEN m.body END AS body,
       CASE WHEN requested.via = 'pull'
            THEN pg_notify('coordinator_checks', planned.producer_group) END AS notified
FROM planned
JOIN messages AS m ON m.id = planned.id
LEFT JOIN rescheduled ON rescheduled.id = planned.id
LEFT JOIN requested ON requested.message_offset = planned.id
ORDER BY planned.id;

-- name: take_check_requests
-- A long poll takes the pending pulled check requests addressed to one
-- instance; each is handed over once (at most once per check: one lost in
-- transit is issued again at the message's next check).
WITH mine AS (
    SELECT message_offset
    FROM check_requests
    WHERE producer_group = %(producer_group)s::text
      AND instance_id = %(instance_id)s::text
      AND status = 'pending'
      AND via = 'pull'
    ORDER BY message_offset
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
taken AS (
    UPDATE check_requests AS c
    SET status = 'delivered', delivered_at = now()
    FROM mine
    WHERE c.message_offset = mine.message_offset
    RETURNING c.message_offset, c.check_count
)
SELECT m.id AS message_offset, m.producer_group, taken.check_count, m.message_id,
       m.transaction_id, m.topic, m.tags, m.keys, m.message_group, m.properties, m.born_at,
       m.body
FROM taken
JOIN messages AS m ON m.id = taken.message_offset
WHERE m.state = 'prepared'
ORDER BY m.id;

-- name: start_pushes
-- The claimed push requests that are still open (their message not resolved
-- meanwhile, no newer check claimed): only these are POSTed.
UPDATE check_requests AS c
SET status = 'pushing'
FROM unnest(%(offsets)s::bigint[], %(check_counts)s::int[]) AS claimed (message_offset, check_count)
WHERE c.message_offset = claimed.message_offset
  AND c.check_count = claimed.check_count
  AND c.status = 'pending'
  AND c.via = 'push'
RETURNING c.message_offset;

-- name: finish_push
UPDATE check_requests
SET status = %(status)s::text,
    delivered_at = CASE WHEN %(status)s::text = 'delivered' THEN now() END,
    detail = %(detail)s::text
WHERE message_offset = %(offset)s::bigint
  AND check_count = %(check_count)s::int
  AND status = 'pushing';

-- name: operator_recheck
-- Re-arms a discarded message: prepared again, a fresh check budget, due
-- now. Refused (nothing changes) for any other state, and for a message
-- past retention, which would only expire at once.
WITH target AS (
    SELECT id, message_id, transaction_id, state,
           born_at <= now() - make_interval(secs => %(retention_seconds)s::float8) AS too_old
    FROM messages
    WHERE id = %(offset)s::bigint
    FOR UPDATE
),
changed AS (
    UPDATE messages AS m
    SET state = 'prepared',
        resolved_at = NULL,
        resolution_source = NULL,
        check_count = 0,
        next_check_at = now()
    FROM target
    WHERE m.id = target.id AND target.state = 'discarded' AND NOT target.too_old
    RETURNING m.id, m.state
),
recorded AS (
    INSERT INTO message_history (message_offset, source, from_state, to_state, detail)
    SELECT id, 'operator', 'discarded', state, 're-armed: check count reset, checked back now'
    FROM changed
)
SELECT target.id, target.message_id, target.transaction_id, target.too_old,
       target.state AS previous_state, changed.state AS new_state
FROM target
LEFT JOIN changed ON changed.id = target.id;

-- name: operator_resolve
-- An operator commits or rolls back a prepared or discarded message by hand.
WITH target AS (
    SELECT id, message_id, transaction_id, state
    FROM messages
    WHERE id = %(offset)s::bigint
    FOR UPDATE
),
changed AS (
    UPDATE messages AS m
    SET state = %(to_state)s::text,
        resolved_at = now(),
        resolution_source = 'operator',
        next_check_at = NULL
    FROM target
    WHERE m.id = target.id AND target.state IN ('prepared', 'discarded')
    RETURNING m.id, m.state
),
recorded AS (
    INSERT INTO message_history (message_offset, source, from_state, to_state, detail)
    SELECT changed.id, 'operator', target.state, changed.state, 'resolved by hand'
    FROM changed
    JOIN target ON target.id = changed.id
)
SELECT target.id, target.message_id, target.transaction_id,
       target.state AS previous_state, changed.state AS new_state
FROM target
LEFT JOIN changed ON changed.id = target.id;

-- name: outstanding_half_messages
-- Metrics: pending half messages per producer group and topic.
SELECT producer_group, topic, count(*) AS messages
FROM messages
WHERE state = 'prepared'
GROUP BY producer_group, topic;

-- name: producer_instance_counts
SELECT producer_group,
       count(*) FILTER (
           WHERE last_seen_at > now() - make_interval(secs => %(producer_ttl_seconds)s::float8)
       ) AS live,
       count(*) AS registered
FROM producers
GROUP BY producer_group;

-- ============================================================================
-- Data pipeline (issue 7): what the Spark jobs read, the archive's selection,
-- checksums and deletes, and the report's figures as one SQL aggregate.
-- The Spark side reads these through the coordinator_postgres data source,
-- which splits them into id ranges: they take no ORDER BY.
-- ============================================================================

-- name: pipeline_report_messages
-- The lifecycle report's input: one row per half message.
SELECT id, producer_group, topic, state, check_count, born_at, resolved_at
FROM messages
WHERE kind = 'transactional';

-- name: pipeline_consumer_lag
SELECT consumer_group, topic, lag, in_flight, dead_letters, oldest_pending_at
FROM consumer_lag;

-- name: pipeline_relation_exists
SELECT to_regclass(%(name)s::text) IS NOT NULL AS present;

-- name: pipeline_now
SELECT now() AS now;

-- name: pipeline_archive_plan
-- A run's frozen bounds: the cutoff and the newest offset it may consider.
SELECT now() - make_interval(secs => %(older_than_seconds)s::float8) AS cutoff,
       coalesce(max(id), 0) AS max_id
FROM messages;

-- name: pipeline_archive_messages
-- Archivable (the view archivable_messages: resolved, nothing left to
-- deliver) and resolved before the run's cutoff. Every archive query below
-- reads the same view with the same bounds, so they select the same messages.
SELECT m.id, m.message_id, m.transaction_id, m.kind, m.producer_group, m.tags, m.keys,
       m.message_group, m.body, m.properties::text AS properties, m.state, m.check_count,
       extract(epoch FROM m.check_immunity)::float8 AS check_immunity_seconds,
       m.born_at, m.next_check_at, m.resolved_at, m.resolution_source,
       (m.born_at AT TIME ZONE 'UTC')::date AS born_date, m.topic
FROM archivable_messages m
WHERE m.resolved_at < %(cutoff)s::timestamptz
  AND m.id <= %(max_id)s::bigint;

-- name: pipeline_archive_history
-- The history of exactly the messages pipeline_archive_messages selects,
-- placed in their message's date and topic partition.
SELECT h.id, h.message_offset, h.at, h.source, h.from_state, h.to_state, h.detail,
       (m.born_at AT TIME ZONE 'UTC')::date AS born_date, m.topic
FROM message_history h
JOIN archivable_messages m ON m.id = h.message_offset
WHERE m.resolved_at < %(cutoff)s::timestamptz
  AND m.id <= %(max_id)s::bigint;

-- name: pipeline_archive_message_checksums
-- Per date and topic: rows and the sum of a 60-bit row fingerprint (sha256
-- of every column as text). coordinator/pipeline/checksums.py computes the
-- same fingerprint over the Parquet copy; the two must agree exactly.
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
           coalesce(m.resolution_source, '\N')
       ), 'UTF8')), 'hex'), 1, 15))::bit(60)::bigint) AS checksum
FROM archivable_messages m
WHERE m.resolved_at < %(cutoff)s::timestamptz
  AND m.id <= %(max_id)s::bigint
GROUP BY 1, 2;

-- name: pipeline_archive_history_checksums
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
SELECT id FROM messages WHERE id = ANY(%(ids)s::bigint[]);

-- name: pipeline_archive_lock
-- One archive run per database at a time (session-level advisory lock).
SELECT pg_try_advisory_lock(hashtextextended('coordinator pipeline archive', 7)) AS locked;

-- name: pipeline_archive_unlock
SELECT pg_advisory_unlock(hashtextextended('coordinator pipeline archive', 7)) AS unlocked;

-- name: pipeline_audit_messages
SELECT id, message_id, transaction_id, producer_group, topic, state, properties::text AS properties,
       born_at, resolved_at
FROM messages
WHERE kind = 'transactional';

-- name: pipeline_report_reference
-- The report's figures per producer group, topic and hour as one SQL
-- aggregate: the benchmark's yardstick and the tests' reference.
SELECT producer_group, topic, date_trunc('hour', born_at AT TIME ZONE 'UTC') AS hour,
       count(*) AS messages,
       count(*) FILTER (WHERE state = 'prepared') AS prepared,
       count(*) FILTER (WHERE state = 'committed') AS committed,
       count(*) FILTER (WHERE state = 'rolled_back') AS rolled_back,
       count(*) FILTER (WHERE state = 'discarded') AS discarded,
       count(*) FILTER (WHERE state = 'expired') AS expired,
       percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM resolved_at - born_at)::float8
       ) FILTER (WHERE state IN ('committed', 'rolled_back')) AS latency_s,
       count(*) FILTER (WHERE check_count > 0) AS checked,
       avg(check_count)::float8 AS check_count_mean,
       max(check_count) AS check_count_max,
       (count(*) FILTER (WHERE state = 'discarded'))::float8 / count(*) AS discard_rate,
       (count(*) FILTER (WHERE state = 'expired'))::float8 / count(*) AS expiry_rate,
       percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM %(as_of)s::timestamptz - born_at)::float8
       ) FILTER (WHERE state = 'prepared') AS pending_age_p50_s,
       max(extract(epoch FROM %(as_of)s::timestamptz - born_at)::float8)
           FILTER (WHERE state = 'prepared') AS pending_age_max_s
FROM messages
WHERE kind = 'transactional'
GROUP BY 1, 2, 3;

-- name: pipeline_report_reference_checks
-- The report's check-back count distribution as SQL.
SELECT producer_group, topic, date_trunc('hour', born_at AT TIME ZONE 'UTC') AS hour,
       check_count, count(*) AS messages
FROM messages
WHERE kind = 'transactional'
GROUP BY 1, 2, 3, 4;
