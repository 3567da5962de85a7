-- The SQL of migration 0011 (0011_delivery_times.py runs these blocks).
-- Frozen like the migration itself: the current definitions are in
-- coordinator/db/sql/schema/.

-- name: upgrade
ALTER TABLE messages ADD COLUMN deliver_at timestamptz, ADD COLUMN trace_context text;
ALTER TABLE deliveries ADD COLUMN deliver_at timestamptz;
CREATE INDEX ix_deliveries_delayed ON deliveries (consumer_group, deliver_at)
WHERE deliver_at IS NOT NULL;

-- The view's `m.*` was expanded when it was made: made again, it takes the
-- new columns (at its end, which CREATE OR REPLACE allows).
CREATE OR REPLACE VIEW archivable_messages AS
SELECT m.*
FROM messages m
WHERE m.state <> 'prepared'
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_offset = m.id)
  AND NOT EXISTS (SELECT 1 FROM dead_letters l WHERE l.message_offset = m.id);

-- The fan-out, with delivery times.
CREATE OR REPLACE FUNCTION messages_changed() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    ids bigint[];          -- newly committed messages, in offset order
    topics text[];
    tag_values text[];
    message_groups text[];
    deliver_times timestamptz[];
    closed bigint[];       -- messages that left 'prepared'
    notified text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.id ORDER BY n.id), array_agg(n.topic ORDER BY n.id),
               array_agg(n.tags ORDER BY n.id), array_agg(n.message_group ORDER BY n.id),
               array_agg(n.deliver_at ORDER BY n.id)
        INTO ids, topics, tag_values, message_groups, deliver_times
        FROM new_messages n
        WHERE n.state = 'committed';
    ELSE
        -- Only a change *to* 'committed' delivers: re-running for an already
        -- committed row (any other UPDATE, e.g. check counts) adds nothing.
        SELECT array_agg(c.id ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.topic ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.tags ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.message_group ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.deliver_at ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.id) FILTER (WHERE c.closes)
        INTO ids, topics, tag_values, message_groups, deliver_times, closed
        FROM (
            SELECT n.id, n.topic, n.tags, n.message_group, n.deliver_at,
                   n.state = 'committed' AND o.state <> 'committed' AS delivers,
                   o.state = 'prepared' AND n.state <> 'prepared' AS closes
            FROM new_messages n
            JOIN old_messages o ON o.id = n.id
        ) AS c;
        -- A resolved message needs no more check-backs.
        IF closed IS NOT NULL THEN
            DELETE FROM check_requests WHERE message_offset = ANY (closed);
        END IF;
    END IF;
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    -- FIFO: commits of one message group take turns from here until they
    -- commit, so delivery ids within a message group follow commit order and
    -- a lower id can never become visible after a higher one was handed out.
    -- Locks are taken in key order so that batches cannot deadlock. (The IF
    -- is a plain expression, no query: most commits have no message group.)
    IF cardinality(array_remove(message_groups, NULL)) > 0 THEN
        PERFORM pg_advisory_xact_lock(keys.k)
        FROM (
            SELECT DISTINCT hashtextextended(m.topic || ' ' || m.message_group, 4004) AS k
            FROM unnest(topics, message_groups) AS m (topic, message_group)
            WHERE m.message_group IS NOT NULL
              AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.topic = m.topic AND s.fifo)
            ORDER BY k
        ) AS keys;
    END IF;
    -- ORDER BY m.id gives a batch's deliveries ids in offset order. A tag
    -- filter is a plain comparison; only a SQL92 filter (subscriptions.filter)
    -- reads the message's properties, by its primary key, so commits to
    -- topics without one do no more work than before.
    WITH subscribed AS (
        SELECT s.consumer_group, s.topic, s.tags, s.filter
        FROM subscriptions s
        WHERE s.topic = ANY (topics)
        FOR KEY SHARE
    ),
    fanned AS (
        INSERT INTO deliveries (
            message_offset, consumer_group, topic, message_group, visible_at, deliver_at
        )
        SELECT m.id, s.consumer_group, m.topic, m.message_group,
               greatest(now(), m.deliver_at),
               CASE WHEN m.deliver_at > now() THEN m.deliver_at END
        FROM unnest(ids, topics, tag_values, message_groups, deliver_times)
             AS m (id, topic, tags, message_group, deliver_at)
        JOIN subscribed s ON s.topic = m.topic
        WHERE CASE
            WHEN s.filter IS NULL THEN s.tags IS NULL OR m.tags = ANY (s.tags)
            ELSE sql92_matches(
                s.filter, m.tags, (SELECT p.properties FROM messages p WHERE p.id = m.id)
            )
        END
        ORDER BY m.id, s.consumer_group
        ON CONFLICT (message_offset, consumer_group) DO NOTHING
        RETURNING consumer_group
    )
    SELECT array_agg(DISTINCT consumer_group) INTO notified FROM fanned;
    -- Delivered to waiting receivers only once this transaction commits.
    IF notified IS NOT NULL THEN
        PERFORM pg_notify('coordinator_deliveries', g) FROM unnest(notified) AS g;
    END IF;
    RETURN NULL;
END
$$;

-- name: downgrade
DROP VIEW archivable_messages;

CREATE OR REPLACE FUNCTION messages_changed() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    ids bigint[];          -- newly committed messages, in offset order
    topics text[];
    tag_values text[];
    message_groups text[];
    closed bigint[];       -- messages that left 'prepared'
    notified text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.id ORDER BY n.id), array_agg(n.topic ORDER BY n.id),
               array_agg(n.tags ORDER BY n.id), array_agg(n.message_group ORDER BY n.id)
        INTO ids, topics, tag_values, message_groups
        FROM new_messages n
        WHERE n.state = 'committed';
    ELSE
        -- Only a change *to* 'committed' delivers: re-running for an already
        -- committed row (any other UPDATE, e.g. check counts) adds nothing.
        SELECT array_agg(c.id ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.topic ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.tags ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.message_group ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.id) FILTER (WHERE c.closes)
        INTO ids, topics, tag_values, message_groups, closed
        FROM (
            SELECT n.id, n.topic, n.tags, n.message_group,
                   n.state = 'committed' AND o.state <> 'committed' AS delivers,
                   o.state = 'prepared' AND n.state <> 'prepared' AS closes
            FROM new_messages n
            JOIN old_messages o ON o.id = n.id
        ) AS c;
        -- A resolved message needs no more check-backs.
        IF closed IS NOT NULL THEN
            DELETE FROM check_requests WHERE message_offset = ANY (closed);
        END IF;
    END IF;
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    -- FIFO: commits of one message group take turns from here until they
    -- commit, so delivery ids within a message group follow commit order and
    -- a lower id can never become visible after a higher one was handed out.
    -- Locks are taken in key order so that batches cannot deadlock. (The IF
    -- is a plain expression, no query: most commits have no message group.)
    IF cardinality(array_remove(message_groups, NULL)) > 0 THEN
        PERFORM pg_advisory_xact_lock(keys.k)
        FROM (
            SELECT DISTINCT hashtextextended(m.topic || ' ' || m.message_group, 4004) AS k
            FROM unnest(topics, message_groups) AS m (topic, message_group)
            WHERE m.message_group IS NOT NULL
              AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.topic = m.topic AND s.fifo)
            ORDER BY k
        ) AS keys;
    END IF;
    -- ORDER BY m.id gives a batch's deliveries ids in offset order. A tag
    -- filter is a plain comparison; only a SQL92 filter (subscriptions.filter)
    -- reads the message's properties, by its primary key, so commits to
    -- topics without one do no more work than before.
    WITH subscribed AS (
        SELECT s.consumer_group, s.topic, s.tags, s.filter
        FROM subscriptions s
        WHERE s.topic = ANY (topics)
        FOR KEY SHARE
    ),
    fanned AS (
        INSERT INTO deliveries (message_offset, consumer_group, topic, message_group)
        SELECT m.id, s.consumer_group, m.topic, m.message_group
        FROM unnest(ids, topics, tag_values, message_groups) AS m (id, topic, tags, message_group)
        JOIN subscribed s ON s.topic = m.topic
        WHERE CASE
            WHEN s.filter IS NULL THEN s.tags IS NULL OR m.tags = ANY (s.tags)
            ELSE sql92_matches(
                s.filter, m.tags, (SELECT p.properties FROM messages p WHERE p.id = m.id)
            )
        END
        ORDER BY m.id, s.consumer_group
        ON CONFLICT (message_offset, consumer_group) DO NOTHING
        RETURNING consumer_group
    )
    SELECT array_agg(DISTINCT consumer_group) INTO notified FROM fanned;
    -- Delivered to waiting receivers only once this transaction commits.
    IF notified IS NOT NULL THEN
        PERFORM pg_notify('coordinator_deliveries', g) FROM unnest(notified) AS g;
    END IF;
    RETURN NULL;
END
$$;

DROP INDEX ix_deliveries_delayed;
ALTER TABLE deliveries DROP COLUMN deliver_at;
ALTER TABLE messages DROP COLUMN deliver_at, DROP COLUMN trace_context;

CREATE VIEW archivable_messages AS
SELECT m.*
FROM messages m
WHERE m.state <> 'prepared'
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_offset = m.id)
  AND NOT EXISTS (SELECT 1 FROM dead_letters l WHERE l.message_offset = m.id);
