-- Messages and their history: storage, the triggers that keep deliveries,
-- check requests and history in step with messages, and the views people
-- query. The tables are in coordinator/db/schema.py;
-- coordinator.db.schema_objects runs these blocks after creating them
-- (storage, then functions, then triggers, then views).

-- name: messages_storage
-- Every message row is updated once or twice (resolution, check counts):
-- leave room for in-page updates and vacuum well before the default 20%.
ALTER TABLE messages SET (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);

-- name: message_history_storage
-- Insert-only but for the retention job's deletes, which leave dead rows in
-- the oldest pages: vacuum after 5% of the table like messages, not the
-- default 20% (a 10M-row history would otherwise wait for 2M dead rows).
ALTER TABLE message_history SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);

-- name: messages_changed
-- Once per INSERT or UPDATE statement on messages: fans newly committed
-- messages out to deliveries and closes the check requests of messages that
-- left `prepared`. It reads only the statement's transition tables and
-- index lookups. The plans are generic (planned once per session) and may
-- not scan a table: the arrays below can hold one id or thousands, and a
-- table that was empty when the plan was made may hold millions of rows
-- later. A message with a delivery time still ahead gets deliveries that
-- become visible then (and carry it in deliver_at, for the receivers that
-- wait for it); one whose time has passed is visible at once.
CREATE FUNCTION messages_changed() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET search_path FROM CURRENT
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

-- name: messages_deleted
-- ON DELETE CASCADE, once per statement: no foreign key points at messages
-- from message_history or deliveries, because a per-row key check cost more
-- than the row on the hot path. Each plpgsql statement takes a new
-- snapshot, so rows a concurrent transaction committed while this DELETE
-- waited for its locks are seen and removed too.
CREATE FUNCTION messages_deleted() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
SET search_path FROM CURRENT
AS $$
DECLARE
    gone bigint[] := ARRAY(SELECT id FROM old_messages);
BEGIN
    DELETE FROM message_history WHERE message_offset = ANY (gone);
    DELETE FROM deliveries WHERE message_offset = ANY (gone);
    RETURN NULL;
END
$$;

-- name: messages_changed_inserted
-- Transition tables cannot serve a trigger with two events, hence one
-- trigger per event sharing the function.
CREATE TRIGGER messages_changed_inserted AFTER INSERT ON messages
REFERENCING NEW TABLE AS new_messages
FOR EACH STATEMENT EXECUTE FUNCTION messages_changed();

-- name: messages_changed_updated
CREATE TRIGGER messages_changed_updated AFTER UPDATE ON messages
REFERENCING OLD TABLE AS old_messages NEW TABLE AS new_messages
FOR EACH STATEMENT EXECUTE FUNCTION messages_changed();

-- name: messages_deleted_trigger
CREATE TRIGGER messages_deleted AFTER DELETE ON messages
REFERENCING OLD TABLE AS old_messages
FOR EACH STATEMENT EXECUTE FUNCTION messages_deleted();

-- name: pending_transactions
CREATE VIEW pending_transactions AS
SELECT id AS message_offset, message_id, transaction_id, producer_group, topic, tags,
       born_at, now() - born_at AS age, check_count, check_immunity, next_check_at
FROM messages
WHERE state = 'prepared';

-- name: message_counts
CREATE VIEW message_counts AS
SELECT producer_group, topic, state, count(*) AS messages, min(born_at) AS oldest_born_at
FROM messages
GROUP BY producer_group, topic, state;

-- name: message_timeline
CREATE VIEW message_timeline AS
SELECT m.id AS message_offset, m.message_id, m.transaction_id, m.producer_group,
       m.topic, h.id AS history_id, h.at, h.source, h.from_state, h.to_state, h.detail
FROM message_history h
JOIN messages m ON m.id = h.message_offset;
