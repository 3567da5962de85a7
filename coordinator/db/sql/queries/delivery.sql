-- Delivery: subscriptions, receive, ack, invisible duration, dead letters,
-- lag. Deliveries are created by the trigger on messages (messages_changed),
-- in the transaction that commits a message.

-- name: lock_group_subscriptions
-- Taken in the transaction of upsert_subscription, before it: the group's
-- subscribers take turns, so concurrent first subscriptions cannot pass the
-- count together. (upsert_subscription, a statement of its own, counts with
-- a snapshot taken after the lock: it sees what the one before committed.)
SELECT FROM pg_advisory_xact_lock(hashtextextended(%(consumer_group)s::text, 4005));

-- name: upsert_subscription
-- returns: consumer_group, topic, expression, tags, filter_type, fifo, max_delivery_attempts,
-- returns: created_at, created
-- xmax = 0 only for a freshly inserted row: tells "created" from "changed".
-- A group takes a new topic only while it has fewer than max_subscriptions
-- (max_subscriptions_per_group): no row back means it is full. Run after
-- lock_group_subscriptions in one transaction, so the count is exact.
INSERT INTO subscriptions (
    consumer_group, topic, expression, tags, filter_type, filter, fifo, max_delivery_attempts
)
SELECT %(consumer_group)s::text, %(topic)s::text, %(expression)s::text, %(tags)s::text[],
       %(filter_type)s::text, %(filter)s::jsonb, %(fifo)s::boolean,
       %(max_delivery_attempts)s::integer
WHERE EXISTS (
          SELECT FROM subscriptions
          WHERE consumer_group = %(consumer_group)s::text AND topic = %(topic)s::text
      )
   OR (
          SELECT count(*) FROM subscriptions WHERE consumer_group = %(consumer_group)s::text
      ) < %(max_subscriptions)s::integer
ON CONFLICT (consumer_group, topic) DO UPDATE
SET expression = EXCLUDED.expression,
    tags = EXCLUDED.tags,
    filter_type = EXCLUDED.filter_type,
    filter = EXCLUDED.filter,
    fifo = EXCLUDED.fifo,
    max_delivery_attempts = EXCLUDED.max_delivery_attempts
RETURNING consumer_group, topic, expression, tags, filter_type, fifo, max_delivery_attempts,
          created_at, (xmax = 0) AS created;

-- name: delete_subscription
-- returns: consumer_group, topic, expression, tags, filter_type, fifo, max_delivery_attempts,
-- returns: created_at
-- Its pending deliveries go with it (trigger subscriptions_deleted); dead
-- letters stay.
DELETE FROM subscriptions
WHERE consumer_group = %(consumer_group)s::text AND topic = %(topic)s::text
RETURNING consumer_group, topic, expression, tags, filter_type, fifo, max_delivery_attempts,
          created_at;

-- name: list_subscriptions
-- returns: consumer_group, topic, expression, tags, filter_type, fifo, max_delivery_attempts,
-- returns: created_at
SELECT consumer_group, topic, expression, tags, filter_type, fifo, max_delivery_attempts,
       created_at
FROM subscriptions
WHERE %(consumer_group)s::text IS NULL OR consumer_group = %(consumer_group)s::text
ORDER BY consumer_group, topic;

-- name: count_subscriptions
-- returns: subscriptions
SELECT count(*) AS subscriptions
FROM subscriptions
WHERE consumer_group = %(consumer_group)s::text
  AND (%(topic)s::text IS NULL OR topic = %(topic)s::text);

-- name: claim_deliveries
-- returns: dead_lettered, receipt_handle, attempts, visible_at, committed_at, consumer_group,
-- returns: message_offset, message_id, transaction_id, producer_group, topic, tags, keys,
-- returns: message_group, properties, body, born_at, deliver_at, trace_context
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
       m.born_at, m.deliver_at, m.trace_context
FROM outcome o
JOIN messages m ON m.id = o.message_offset
ORDER BY o.id;

-- name: next_delayed_delivery
-- returns: seconds
-- Seconds until the group's next delayed delivery comes due (NULL: none
-- ahead), read from ix_deliveries_delayed alone: a waiting receive sleeps
-- no longer, since no NOTIFY marks that moment.
SELECT extract(epoch FROM min(d.deliver_at) - now())::float8 AS seconds
FROM deliveries d
WHERE d.consumer_group = %(consumer_group)s::text
  AND d.deliver_at > now()
  AND (%(topic)s::text IS NULL OR d.topic = %(topic)s::text);

-- name: ack_deliveries
-- returns: receipt_handle, outcome, unblocks_message_group
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
-- returns: found, receipt_handle, visible_at, attempts
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

-- name: bury_delivery
-- returns: buried, found, unblocks_message_group
-- Moves an in-flight delivery to the group's dead letters at the consumer's
-- request (RocketMQ's ForwardMessageToDeadLetterQueue), by its current
-- receipt handle. found tells a stale handle (the delivery is still there
-- under a newer one) from one that is gone.
WITH buried AS (
    DELETE FROM deliveries d
    WHERE d.id = %(delivery_id)s::bigint
      AND d.consumer_group = %(consumer_group)s::text
      AND d.receipt_handle = %(receipt_handle)s::text
    RETURNING d.message_offset, d.consumer_group, d.topic, d.attempts, d.committed_at,
              d.message_group
),
dead AS (
    INSERT INTO dead_letters (message_offset, consumer_group, topic, attempts, committed_at)
    SELECT message_offset, consumer_group, topic, attempts, committed_at
    FROM buried
    ON CONFLICT (message_offset, consumer_group) DO NOTHING
)
SELECT (SELECT count(*) FROM buried) AS buried,
       EXISTS (
           SELECT 1 FROM deliveries
           WHERE id = %(delivery_id)s::bigint AND consumer_group = %(consumer_group)s::text
       ) AS found,
       EXISTS (SELECT 1 FROM buried WHERE message_group IS NOT NULL) AS unblocks_message_group;

-- name: notify_consumer_group
-- returns: pg_notify
SELECT pg_notify('coordinator_deliveries', %(consumer_group)s::text);

-- name: list_dead_letters
-- returns: id, consumer_group, topic, attempts, committed_at, dead_at, message_offset, message_id,
-- returns: transaction_id, producer_group, tags, keys, message_group, properties, body, born_at
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
-- returns: id, consumer_group, topic
SELECT id, consumer_group, topic FROM dead_letters WHERE id = %(id)s::bigint;

-- name: requeue_dead_letters
-- returns: consumer_group, requeued
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
    -- committed_at stays the message's commit (consumers see it); the
    -- unacked retention counts from requeued_at.
    INSERT INTO deliveries (message_offset, consumer_group, topic, message_group, committed_at,
                            requeued_at)
    SELECT c.message_offset, c.consumer_group, c.topic, m.message_group, c.committed_at, now()
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
-- returns: consumer_group, topic, lag, in_flight, dead_letters, oldest_pending_at
SELECT consumer_group, topic, lag, in_flight, dead_letters, oldest_pending_at
FROM consumer_lag
WHERE %(consumer_group)s::text IS NULL OR consumer_group = %(consumer_group)s::text
ORDER BY consumer_group, topic;
