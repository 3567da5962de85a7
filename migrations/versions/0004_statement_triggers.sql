-- The SQL of migration 0004 (0004_statement_triggers.py runs these blocks).
-- Frozen like the migration itself: the current definitions are in
-- coordinator/db/sql/schema/.

-- name: upgrade
DROP TRIGGER messages_close_check_request ON messages;
DROP FUNCTION coordinator_close_check_request();
DROP TRIGGER messages_deliver_inserted ON messages;
DROP TRIGGER messages_deliver_updated ON messages;
DROP FUNCTION deliver_committed_messages();

-- The plans are generic (planned once per session) and may not scan a table:
-- the arrays below can hold one id or thousands, and a table that was empty
-- when the plan was made may hold millions of rows later.
CREATE FUNCTION messages_changed() RETURNS trigger
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
    -- ORDER BY m.id gives a batch's deliveries ids in offset order.
    WITH subscribed AS (
        SELECT s.consumer_group, s.topic, s.tags
        FROM subscriptions s
        WHERE s.topic = ANY (topics)
        FOR KEY SHARE
    ),
    fanned AS (
        INSERT INTO deliveries (message_offset, consumer_group, topic, message_group)
        SELECT m.id, s.consumer_group, m.topic, m.message_group
        FROM unnest(ids, topics, tag_values, message_groups) AS m (id, topic, tags, message_group)
        JOIN subscribed s ON s.topic = m.topic
        WHERE s.tags IS NULL OR m.tags = ANY (s.tags)
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

-- Transition tables cannot serve a trigger with two events, hence one
-- trigger per event sharing the function.
CREATE TRIGGER messages_changed_inserted AFTER INSERT ON messages
REFERENCING NEW TABLE AS new_messages
FOR EACH STATEMENT EXECUTE FUNCTION messages_changed();

CREATE TRIGGER messages_changed_updated AFTER UPDATE ON messages
REFERENCING OLD TABLE AS old_messages NEW TABLE AS new_messages
FOR EACH STATEMENT EXECUTE FUNCTION messages_changed();

-- ON DELETE CASCADE, once per statement. Each plpgsql statement takes a new
-- snapshot, so rows a concurrent transaction committed while this DELETE
-- waited for its locks are seen and removed too.
CREATE FUNCTION messages_deleted() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    gone bigint[] := ARRAY(SELECT id FROM old_messages);
BEGIN
    DELETE FROM message_history WHERE message_offset = ANY (gone);
    DELETE FROM deliveries WHERE message_offset = ANY (gone);
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_deleted AFTER DELETE ON messages
REFERENCING OLD TABLE AS old_messages
FOR EACH STATEMENT EXECUTE FUNCTION messages_deleted();

CREATE FUNCTION subscriptions_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM deliveries d
    USING old_subscriptions s
    WHERE d.consumer_group = s.consumer_group AND d.topic = s.topic;
    RETURN NULL;
END
$$;

CREATE TRIGGER subscriptions_deleted AFTER DELETE ON subscriptions
REFERENCING OLD TABLE AS old_subscriptions
FOR EACH STATEMENT EXECUTE FUNCTION subscriptions_deleted();

-- name: downgrade
DROP TRIGGER subscriptions_deleted ON subscriptions;
DROP FUNCTION subscriptions_deleted();
DROP TRIGGER messages_deleted ON messages;
DROP FUNCTION messages_deleted();
DROP TRIGGER messages_changed_updated ON messages;
DROP TRIGGER messages_changed_inserted ON messages;
DROP FUNCTION messages_changed();

-- Rows the foreign keys (restored after this block) would have refused
-- cannot block the downgrade.
DELETE FROM message_history h WHERE NOT EXISTS
(SELECT 1 FROM messages m WHERE m.id = h.message_offset);
DELETE FROM deliveries d WHERE NOT EXISTS
(SELECT 1 FROM messages m WHERE m.id = d.message_offset) OR NOT EXISTS
(SELECT 1 FROM subscriptions s WHERE s.consumer_group = d.consumer_group AND s.topic = d.topic);

-- The triggers of 0003 (the fan-out, per statement) and 0002 (closing check
-- requests, per row), exactly as those migrations created them.
CREATE FUNCTION deliver_committed_messages() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    committed bigint[];
    notified text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        committed := ARRAY(SELECT id FROM new_messages WHERE state = 'committed');
    ELSE
        committed := ARRAY(
            SELECT n.id
            FROM new_messages n
            JOIN old_messages o ON o.id = n.id
            WHERE n.state = 'committed' AND o.state <> 'committed'
        );
    END IF;
    IF cardinality(committed) = 0 THEN
        RETURN NULL;
    END IF;
    -- FIFO: commits of one message group take turns from here until they
    -- commit, so delivery ids within a message group follow commit order and
    -- a lower id can never become visible after a higher one was handed out.
    -- Locks are taken in key order so that batches cannot deadlock.
    PERFORM pg_advisory_xact_lock(keys.k)
    FROM (
        SELECT DISTINCT hashtextextended(m.topic || ' ' || m.message_group, 4004) AS k
        FROM messages m
        WHERE m.id = ANY (committed)
          AND m.message_group IS NOT NULL
          AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.topic = m.topic AND s.fifo)
        ORDER BY k
    ) AS keys;
    WITH fanned AS (
        INSERT INTO deliveries (message_offset, consumer_group, topic, message_group)
        SELECT m.id, s.consumer_group, m.topic, m.message_group
        FROM messages m
        JOIN subscriptions s ON s.topic = m.topic
        WHERE m.id = ANY (committed)
          AND (s.tags IS NULL OR m.tags = ANY (s.tags))
        ORDER BY m.id, s.consumer_group
        ON CONFLICT (message_offset, consumer_group) DO NOTHING
        RETURNING consumer_group
    )
    SELECT array_agg(DISTINCT consumer_group) INTO notified FROM fanned;
    -- Delivered to waiting receivers only once this transaction commits.
    PERFORM pg_notify('coordinator_deliveries', g) FROM unnest(notified) AS g;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_deliver_inserted AFTER INSERT ON messages
REFERENCING NEW TABLE AS new_messages
FOR EACH STATEMENT EXECUTE FUNCTION deliver_committed_messages();

CREATE TRIGGER messages_deliver_updated AFTER UPDATE ON messages
REFERENCING OLD TABLE AS old_messages NEW TABLE AS new_messages
FOR EACH STATEMENT EXECUTE FUNCTION deliver_committed_messages();

CREATE FUNCTION coordinator_close_check_request() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM check_requests WHERE message_offset = NEW.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_close_check_request
AFTER UPDATE OF state ON messages
FOR EACH ROW
WHEN (OLD.state = 'prepared' AND NEW.state <> 'prepared')
EXECUTE FUNCTION coordinator_close_check_request();
