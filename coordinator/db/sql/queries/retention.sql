-- The retention job (coordinator/core/retention/): each statement deletes
-- one bounded batch in its own short transaction. The rows are claimed FOR
-- UPDATE SKIP LOCKED, so two nodes running rounds at once delete disjoint
-- rows, and a row a receive, an ack or an operator holds is passed over
-- until the next round. %(now)s is the round's clock (NULL: the database's).

-- name: retention_delete_dead_letters
-- returns: consumer_group
-- Dead letters that died before the cutoff, oldest first (ix_dead_letters_dead_at).
WITH doomed AS (
    SELECT x.id
    FROM dead_letters x
    WHERE x.dead_at < %(cutoff)s::timestamptz
    ORDER BY x.dead_at
    LIMIT %(batch_size)s::integer
    FOR UPDATE SKIP LOCKED
)
DELETE FROM dead_letters x
USING doomed
WHERE x.id = doomed.id
RETURNING x.consumer_group;

-- name: retention_delete_unacked_deliveries
-- returns: consumer_group, topic
-- Deliveries their group never acked, committed (and, for a delay or timer
-- message, due: deliver_at holds a delivery time that was ahead at the
-- commit; for a requeued dead letter, requeued: requeued_at) before the
-- cutoff: the latest of the three counts (greatest ignores NULLs). Only
-- the oldest batch_size rows of each group are looked at
-- (ix_deliveries_consumer_group_id: deliveries are made in commit order,
-- a requeue makes a new one), so a round never reads a group's whole
-- backlog; the rest waits for the next batch.
WITH oldest AS (
    SELECT d.id
    FROM (SELECT DISTINCT consumer_group FROM subscriptions) AS g
    -- A group whose oldest delivery was committed after the cutoff has
    -- nothing to drop: its rows are not read (a one-time filter).
    CROSS JOIN LATERAL (
        SELECT h.committed_at
        FROM deliveries h
        WHERE h.consumer_group = g.consumer_group
        ORDER BY h.id
        LIMIT 1
    ) AS head
    CROSS JOIN LATERAL (
        SELECT e.id, greatest(e.committed_at, e.deliver_at, e.requeued_at) AS since
        FROM deliveries e
        WHERE e.consumer_group = g.consumer_group
          AND head.committed_at < %(cutoff)s::timestamptz
        ORDER BY e.id
        LIMIT %(batch_size)s::integer
    ) AS d
    WHERE d.since < %(cutoff)s::timestamptz
),
doomed AS (
    SELECT d.id
    FROM deliveries d
    WHERE d.id IN (SELECT id FROM oldest)
      AND greatest(d.committed_at, d.deliver_at, d.requeued_at) < %(cutoff)s::timestamptz
    ORDER BY d.id
    LIMIT %(batch_size)s::integer
    FOR UPDATE SKIP LOCKED
)
DELETE FROM deliveries d
USING doomed
WHERE d.id = doomed.id
RETURNING d.consumer_group, d.topic;

-- name: retention_delete_resolved_messages
-- returns: state, resolved_at
-- Resolved messages with nothing left to deliver (no delivery row, no dead
-- letter: every subscribed group acked them, or none was subscribed),
-- resolved before the cutoff (and at `since` or later: what an earlier
-- round already walked is left out) and born before the duplicate
-- window's start, oldest resolution first (ix_messages_resolved_at). Their
-- history and
-- deliveries go with them (trigger messages_deleted). The conditions on the
-- row itself are checked again on its newest version once locked: an
-- operator may have re-armed it (prepared again) meanwhile.
WITH doomed AS (
    SELECT m.id
    FROM messages m
    WHERE m.resolved_at < %(cutoff)s::timestamptz
      AND m.resolved_at >= coalesce(%(since)s::timestamptz, '-infinity')
      AND m.born_at < %(born_before)s::timestamptz
      AND m.state <> 'prepared'
      AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_offset = m.id)
      AND NOT EXISTS (SELECT 1 FROM dead_letters l WHERE l.message_offset = m.id)
    ORDER BY m.resolved_at
    LIMIT %(batch_size)s::integer
    FOR UPDATE SKIP LOCKED
)
DELETE FROM messages m
USING doomed
WHERE m.id = doomed.id
RETURNING m.state, m.resolved_at;

-- name: retention_mark_received
-- The consumer groups whose receives this node saw since its previous round.
-- A row is written at most once a minute (the idle bound is in hours), so
-- busy groups on many nodes do not rewrite their subscriptions every round.
UPDATE subscriptions
SET last_received_at = %(at)s::timestamptz
WHERE consumer_group = ANY (%(groups)s::text[])
  AND (last_received_at IS NULL
       OR last_received_at < %(at)s::timestamptz - interval '1 minute');

-- name: retention_idle_consumer_groups
-- returns: consumer_group, last_received_at, pending
-- Consumer groups none of whose subscriptions received since the cutoff
-- (a group that never received counts from its first subscription), with
-- the deliveries they leave pending (counted up to 100,000: an idle group's
-- backlog may be large, and a round runs every few seconds).
SELECT s.consumer_group,
       max(coalesce(s.last_received_at, s.created_at)) AS last_received_at,
       (SELECT count(*) FROM (
            SELECT 1 FROM deliveries d WHERE d.consumer_group = s.consumer_group LIMIT 100000
        ) AS p) AS pending
FROM subscriptions s
GROUP BY s.consumer_group
HAVING max(coalesce(s.last_received_at, s.created_at)) < %(cutoff)s::timestamptz
ORDER BY s.consumer_group;

-- name: retention_remove_consumer_groups
-- returns: consumer_group, topic
-- Idle groups' subscriptions, a batch of groups in one statement; their
-- pending deliveries go with them (trigger subscriptions_deleted, once for
-- the statement). Checked again: a receive may have been recorded since
-- the groups were found idle, and a group with any recent subscription
-- keeps them all.
DELETE FROM subscriptions s
WHERE s.consumer_group = ANY (%(consumer_groups)s::text[])
  AND NOT EXISTS (
      SELECT 1 FROM subscriptions r
      WHERE r.consumer_group = s.consumer_group
        AND coalesce(r.last_received_at, r.created_at) >= %(cutoff)s::timestamptz
  )
RETURNING s.consumer_group, s.topic;

-- name: retention_table_figures
-- returns: name, bytes, rows, oldest_age_seconds
-- Each table the job keeps to size: its size on disk (indexes and TOAST
-- included), its row count as the planner last estimated it, and the age
-- of its oldest row (read from the head of an index, never a scan). The
-- oldest by time is the first by id for messages and history: born_at and
-- at are the inserting transaction's now(), never written otherwise by
-- the coordinator (only `pipeline generate`'s synthetic rows are), so id
-- order is time order up to the length of a transaction. Deliveries are
-- made in commit order too, except a requeued dead letter: a new id, its
-- old commit time (ix_deliveries_requeued_committed_at holds those).
SELECT t.name,
       pg_total_relation_size(t.name::regclass) AS bytes,
       greatest((SELECT c.reltuples FROM pg_class c WHERE c.oid = t.name::regclass), 0)::bigint
           AS rows,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - t.oldest)::float8
           AS oldest_age_seconds
FROM (
    VALUES
        ('messages', (SELECT born_at FROM messages ORDER BY id LIMIT 1)),
        ('message_history', (SELECT at FROM message_history ORDER BY id LIMIT 1)),
        ('deliveries', least(
            (SELECT committed_at FROM deliveries ORDER BY id LIMIT 1),
            (SELECT committed_at FROM deliveries WHERE requeued_at IS NOT NULL
             ORDER BY committed_at LIMIT 1))),
        ('dead_letters', (SELECT dead_at FROM dead_letters ORDER BY dead_at LIMIT 1))
) AS t (name, oldest);

-- name: retention_clock
-- returns: now
SELECT coalesce(%(now)s::timestamptz, now()) AS now;
