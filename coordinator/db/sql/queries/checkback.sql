-- Check-back: the producer registry, the check claim, pull and push
-- dispatch, and operator actions.

-- name: heartbeat_producer
-- returns: producer_group, instance_id, check_url, registered_at, last_seen_at, live, woken
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
-- returns: instance_id
DELETE FROM producers
WHERE producer_group = %(producer_group)s::text AND instance_id = %(instance_id)s::text
RETURNING instance_id;

-- name: list_producers
-- returns: producer_group, instance_id, check_url, registered_at, last_seen_at, live
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
-- returns: message_offset, action, producer_group, instance_id, check_url, via, check_count,
-- returns: message_id, transaction_id, topic, tags, keys, message_group, properties, born_at,
-- returns: age_seconds, body, notified
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
--            or the group's check source answers it (mode `only`, or no
--            live instance): counted alike, a check request via `database`
--            with no instance
--   wait     no live instance nor check source: the budget is not touched;
--            the attempt is recorded in check_requests (status no_producer)
-- A message resolved in the meantime is not `prepared` and never claimed.
-- Nor is one whose previous push is still queued or in flight on this node
-- (pushes_in_flight): a slow check URL is not sent the same message twice at
-- once; it is claimed again once that push is done.
-- Waiting long polls of pulled groups are woken (NOTIFY is sent on commit;
-- repeats in one transaction fold into one).
WITH due AS (
    SELECT id, producer_group, check_count, born_at
    FROM messages
    WHERE state = 'prepared' AND next_check_at <= now()
      AND id <> ALL(%(pushes_in_flight)s::bigint[])
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
sourced AS (
    SELECT producer_group, mode
    FROM check_sources
    WHERE producer_group IN (SELECT producer_group FROM due)
),
asked AS (
    SELECT due.id, due.producer_group, due.check_count, due.born_at,
           sourced.mode = 'only' OR (sourced.mode IS NOT NULL AND live.instance_id IS NULL)
               AS by_database,
           live.instance_id, live.check_url
    FROM due
    LEFT JOIN live
      ON live.producer_group = due.producer_group
     AND live.slot = (due.id + due.check_count) %% live.instances
    LEFT JOIN sourced ON sourced.producer_group = due.producer_group
),
planned AS (
    SELECT id, producer_group, check_count, by_database,
           CASE WHEN by_database THEN NULL ELSE instance_id END AS instance_id,
           CASE WHEN by_database THEN NULL ELSE check_url END AS check_url,
           CASE
               WHEN born_at <= now() - make_interval(secs => %(retention_seconds)s::float8)
                   THEN 'expire'
               WHEN check_count >= %(check_max)s::int THEN 'discard'
               WHEN by_database OR instance_id IS NOT NULL THEN 'check'
               ELSE 'wait'
           END AS action
    FROM asked
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
                WHEN planned.by_database THEN 'database'
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
       -- an expired or discarded message's prepare-to-resolution time, on the
       -- database's clock (its resolved_at is now() too)
       extract(epoch FROM now() - m.born_at)::float8 AS age_seconds,
       CASE WHEN requested.via = 'push' THEN m.body END AS body,
       CASE WHEN requested.via = 'pull'
            THEN pg_notify('coordinator_checks', planned.producer_group) END AS notified
FROM planned
JOIN messages AS m ON m.id = planned.id
LEFT JOIN rescheduled ON rescheduled.id = planned.id
LEFT JOIN requested ON requested.message_offset = planned.id
ORDER BY planned.id;

-- name: take_check_requests
-- returns: message_offset, producer_group, check_count, message_id, transaction_id, topic, tags,
-- returns: keys, message_group, properties, born_at, body
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
-- returns: message_offset
-- The claimed push (or database) requests that are still open (their message not resolved
-- meanwhile, no newer check claimed): only these are POSTed.
UPDATE check_requests AS c
SET status = 'pushing'
FROM unnest(%(offsets)s::bigint[], %(check_counts)s::int[]) AS claimed (message_offset, check_count)
WHERE c.message_offset = claimed.message_offset
  AND c.check_count = claimed.check_count
  AND c.status = 'pending'
  AND c.via = %(via)s::text
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
-- returns: id, message_id, transaction_id, too_old, previous_state, new_state
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
-- returns: id, message_id, transaction_id, previous_state, new_state
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


-- name: put_check_source
-- returns: producer_group, database_url, has_password, barrier_table, mode, created_at, updated_at,
-- returns: last_check_at, last_ok, last_error, consecutive_failures
-- Registers a producer group's check source, or replaces it (its record of
-- past checks starts over).
INSERT INTO check_sources AS s (
    producer_group, database_url, password_encrypted, barrier_table, mode
)
VALUES (
    %(producer_group)s::text, %(database_url)s::text, %(password_encrypted)s::text,
    %(barrier_table)s::text, %(mode)s::text
)
ON CONFLICT (producer_group) DO UPDATE
SET database_url = EXCLUDED.database_url,
    password_encrypted = EXCLUDED.password_encrypted,
    barrier_table = EXCLUDED.barrier_table,
    mode = EXCLUDED.mode,
    updated_at = now(),
    last_check_at = NULL,
    last_ok = NULL,
    last_error = NULL,
    consecutive_failures = 0
RETURNING s.producer_group, s.database_url, s.password_encrypted IS NOT NULL AS has_password,
          s.barrier_table, s.mode, s.created_at, s.updated_at, s.last_check_at, s.last_ok,
          s.last_error, s.consecutive_failures;

-- name: list_check_sources
-- returns: producer_group, database_url, has_password, barrier_table, mode, created_at, updated_at,
-- returns: last_check_at, last_ok, last_error, consecutive_failures
-- Never the encrypted password: only whether there is one.
SELECT producer_group, database_url, password_encrypted IS NOT NULL AS has_password,
       barrier_table, mode, created_at, updated_at, last_check_at, last_ok, last_error,
       consecutive_failures
FROM check_sources
WHERE %(producer_group)s::text IS NULL OR producer_group = %(producer_group)s::text
ORDER BY producer_group;

-- name: check_source_for_check
-- returns: producer_group, database_url, password_encrypted, barrier_table
-- What a database check connects with.
SELECT producer_group, database_url, password_encrypted, barrier_table
FROM check_sources
WHERE producer_group = %(producer_group)s::text;

-- name: delete_check_source
-- returns: producer_group
DELETE FROM check_sources
WHERE producer_group = %(producer_group)s::text
RETURNING producer_group;

-- name: record_check_source_check
-- How the latest database check of a group went (shown by the status page
-- and `coordinator producers`).
UPDATE check_sources
SET last_check_at = now(),
    last_ok = %(ok)s::boolean,
    last_error = CASE WHEN %(ok)s::boolean THEN NULL ELSE %(error)s::text END,
    consecutive_failures = CASE WHEN %(ok)s::boolean THEN 0 ELSE consecutive_failures + 1 END
WHERE producer_group = %(producer_group)s::text;
