-- The overview: what the status page, `coordinator status` and the database
-- gauges of /metrics show (coordinator/core/overview.py). Each statement
-- reads a bounded index range, never a whole table of messages, history or
-- deliveries: the prepared half messages through their partial index (its
-- size follows the pending messages, not the table), the resolutions of
-- recent minutes through ix_messages_resolved_at, each consumer group's
-- deliveries and dead letters through their (consumer_group, id) indexes up
-- to a limit. tests/integration/test_overview_cost.py EXPLAINs each of them
-- on large tables.

-- name: overview_snapshot
-- All statements of one overview see one snapshot and one now(), so its
-- figures add up.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: overview_clock
-- returns: now
SELECT now() AS now;

-- name: pending_by_age
-- returns: producer_group, topic, bucket, messages, due, oldest_born_at
-- Prepared half messages per producer group, topic and age bucket:
-- width_bucket gives 0 below the first bound, 1 from the first to the
-- second, ..., one per bound above the last.
SELECT producer_group, topic,
       width_bucket(extract(epoch FROM now() - born_at)::float8, %(bounds)s::float8[]) AS bucket,
       count(*) AS messages,
       count(*) FILTER (WHERE next_check_at <= now()) AS due,
       min(born_at) AS oldest_born_at
FROM messages
WHERE state = 'prepared'
GROUP BY producer_group, topic, bucket;

-- name: oldest_half_messages
-- returns: message_offset, message_id, transaction_id, producer_group, topic, born_at, age,
-- returns: check_count, next_check_at, check_status, check_detail
-- The oldest pending half messages, with their latest check-back.
SELECT m.id AS message_offset, m.message_id, m.transaction_id, m.producer_group, m.topic,
       m.born_at, now() - m.born_at AS age, m.check_count, m.next_check_at,
       c.status AS check_status, c.detail AS check_detail
FROM messages AS m
LEFT JOIN check_requests AS c ON c.message_offset = m.id
WHERE m.state = 'prepared'
ORDER BY m.born_at, m.id
LIMIT %(limit)s;

-- name: resolutions_per_minute
-- returns: minute, state, source, messages
-- Half messages resolved since `since`, per minute, new state and source.
-- resolved_at is the resolving transaction's now(), so a minute is complete
-- once no transaction that started in it is still running.
SELECT date_trunc('minute', resolved_at) AS minute, state, resolution_source AS source,
       count(*) AS messages
FROM messages
WHERE resolved_at >= %(since)s::timestamptz
  AND kind = 'transactional'
GROUP BY minute, state, source;

-- name: check_requests_by_group
-- returns: producer_group, open, delivered, failed, no_producer, checked_recently, last_failure
-- The latest check-back of every pending half message that was due at least
-- once (at most one row per pending message), per producer group.
SELECT producer_group,
       count(*) FILTER (WHERE status IN ('pending', 'pushing')) AS open,
       count(*) FILTER (WHERE status = 'delivered') AS delivered,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'no_producer') AS no_producer,
       count(*) FILTER (
           WHERE claimed_at > now() - make_interval(secs => %(recent_seconds)s::float8)
       ) AS checked_recently,
       (array_agg(detail ORDER BY claimed_at DESC) FILTER (WHERE status = 'failed'))[1]
           AS last_failure
FROM check_requests
GROUP BY producer_group;

-- name: consumer_figures
-- returns: consumer_group, topic, lag, in_flight, dead_letters, oldest_pending_at, lag_capped,
-- returns: dead_letters_capped
-- Per consumer group and topic: lag (unacked deliveries, ready or in
-- flight), in flight, the oldest unacked commit, and dead letters. Each
-- group's deliveries and dead letters are read in id order up to `limit`
-- rows, through their (consumer_group, id) indexes, so a huge backlog costs
-- a bounded read; *_capped says the count stopped there. The groups holding
-- dead letters (also after their subscription was removed) are found with
-- one index probe per group (a loose index scan).
WITH RECURSIVE dead_groups AS (
    (SELECT consumer_group FROM dead_letters ORDER BY consumer_group LIMIT 1)
    UNION ALL
    SELECT (
        SELECT d.consumer_group
        FROM dead_letters AS d
        WHERE d.consumer_group > g.consumer_group
        ORDER BY d.consumer_group
        LIMIT 1
    )
    FROM dead_groups AS g
    WHERE g.consumer_group IS NOT NULL
),
consumer_groups AS (
    SELECT consumer_group FROM subscriptions
    UNION
    SELECT consumer_group FROM dead_groups WHERE consumer_group IS NOT NULL
),
unacked AS (
    SELECT g.consumer_group, u.topic, u.lag, u.in_flight, u.oldest_pending_at,
           sum(u.lag) OVER (PARTITION BY g.consumer_group) >= %(limit)s AS lag_capped
    FROM consumer_groups AS g
    CROSS JOIN LATERAL (
        SELECT d.topic,
               count(*) AS lag,
               count(*) FILTER (
                   WHERE d.receipt_handle IS NOT NULL AND d.visible_at > now()
               ) AS in_flight,
               min(d.committed_at) AS oldest_pending_at
        FROM (
            SELECT topic, receipt_handle, visible_at, committed_at
            FROM deliveries
            WHERE consumer_group = g.consumer_group
            ORDER BY id
            LIMIT %(limit)s
        ) AS d
        GROUP BY d.topic
    ) AS u
),
dead AS (
    SELECT g.consumer_group, x.topic, x.dead_letters,
           sum(x.dead_letters) OVER (PARTITION BY g.consumer_group) >= %(limit)s
               AS dead_letters_capped
    FROM consumer_groups AS g
    CROSS JOIN LATERAL (
        SELECT d.topic, count(*) AS dead_letters
        FROM (
            SELECT topic
            FROM dead_letters
            WHERE consumer_group = g.consumer_group
            ORDER BY id
            LIMIT %(limit)s
        ) AS d
        GROUP BY d.topic
    ) AS x
),
pairs AS (
    SELECT consumer_group, topic FROM subscriptions
    UNION
    SELECT consumer_group, topic FROM unacked
    UNION
    SELECT consumer_group, topic FROM dead
)
SELECT p.consumer_group, p.topic,
       coalesce(u.lag, 0) AS lag,
       coalesce(u.in_flight, 0) AS in_flight,
       coalesce(x.dead_letters, 0) AS dead_letters,
       u.oldest_pending_at,
       coalesce(u.lag_capped, false) AS lag_capped,
       coalesce(x.dead_letters_capped, false) AS dead_letters_capped
FROM pairs AS p
LEFT JOIN unacked AS u USING (consumer_group, topic)
LEFT JOIN dead AS x USING (consumer_group, topic)
ORDER BY p.consumer_group, p.topic;

-- name: producer_counts
-- returns: producer_group, live, registered, check_source_mode, check_source_checked_at,
-- returns: check_source_ok, check_source_error
-- Registered and live instances per producer group (the registry is small:
-- instances not heard from for producer_forget_seconds leave it), and the
-- group's check source, if it has one: its mode and how its last check went.
WITH counts AS (
    SELECT producer_group,
           count(*) FILTER (
               WHERE last_seen_at > now() - make_interval(secs => %(producer_ttl_seconds)s::float8)
           ) AS live,
           count(*) AS registered
    FROM producers
    GROUP BY producer_group
)
SELECT coalesce(counts.producer_group, s.producer_group) AS producer_group,
       coalesce(counts.live, 0) AS live,
       coalesce(counts.registered, 0) AS registered,
       s.mode AS check_source_mode,
       s.last_check_at AS check_source_checked_at,
       s.last_ok AS check_source_ok,
       s.last_error AS check_source_error
FROM counts
FULL JOIN check_sources AS s ON s.producer_group = counts.producer_group
ORDER BY 1;
