-- The SQL of migration 0003 (0003_delivery.py runs these blocks). Frozen
-- like the migration itself: the current definitions are in
-- coordinator/db/sql/schema/.

-- name: upgrade
-- A queue table: every row is inserted, updated at least once and deleted.
-- Room for HOT updates (no updated column is indexed), and vacuum after a
-- small, fixed number of dead rows instead of 20% of a table that is
-- mostly dead rows, unthrottled because the table stays small.
ALTER TABLE deliveries SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);

-- Statement-level, so a batch commit fans out in one INSERT. Transition tables
-- cannot serve a trigger with two events, hence one trigger per event sharing
-- the function. Only a change *to* 'committed' counts: prepared, rolled back,
-- discarded and expired messages never reach a consumer, and re-running the
-- trigger for an already committed row (any other UPDATE, e.g. check counts)
-- adds nothing. ORDER BY m.id gives a batch's deliveries ids in offset order;
-- FIFO subscriptions hand a message group's deliveries out in id order.
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

CREATE VIEW consumer_lag AS
WITH pending AS (
    SELECT consumer_group, topic,
           count(*) AS lag,
           count(*) FILTER (WHERE receipt_handle IS NOT NULL AND visible_at > now()) AS in_flight,
           min(committed_at) AS oldest_pending_at
    FROM deliveries
    GROUP BY consumer_group, topic
),
dead AS (
    SELECT consumer_group, topic, count(*) AS dead_letters
    FROM dead_letters
    GROUP BY consumer_group, topic
),
pairs AS (
    SELECT consumer_group, topic FROM subscriptions
    UNION
    SELECT consumer_group, topic FROM dead
)
SELECT pairs.consumer_group, pairs.topic,
       coalesce(pending.lag, 0) AS lag,
       coalesce(pending.in_flight, 0) AS in_flight,
       coalesce(dead.dead_letters, 0) AS dead_letters,
       pending.oldest_pending_at
FROM pairs
LEFT JOIN pending USING (consumer_group, topic)
LEFT JOIN dead USING (consumer_group, topic);

-- name: downgrade
DROP VIEW IF EXISTS consumer_lag;
DROP TRIGGER IF EXISTS messages_deliver_updated ON messages;
DROP TRIGGER IF EXISTS messages_deliver_inserted ON messages;
DROP FUNCTION IF EXISTS deliver_committed_messages();
