-- Delivery: storage of deliveries, the trigger that removes a deleted
-- subscription's deliveries, and the view consumer_lag. The fan-out of
-- committed messages to deliveries is messages_changed (messages.sql).

-- name: deliveries_storage
-- A queue table: every row is inserted, updated at least once and deleted.
-- Room for HOT updates (no updated column is indexed), and vacuum after a
-- small, fixed number of dead rows instead of 20% of a table that is
-- mostly dead rows, unthrottled because the table stays small.
ALTER TABLE deliveries SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);

-- name: subscriptions_deleted
-- ON DELETE CASCADE from subscriptions to deliveries, once per statement.
-- The fan-out key-share locks the subscriptions it reads, so an unsubscribe
-- waits for a commit that is fanning out to it and then removes what it
-- fanned out.
CREATE FUNCTION subscriptions_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM deliveries d
    USING old_subscriptions s
    WHERE d.consumer_group = s.consumer_group AND d.topic = s.topic;
    RETURN NULL;
END
$$;

-- name: subscriptions_deleted_trigger
CREATE TRIGGER subscriptions_deleted AFTER DELETE ON subscriptions
REFERENCING OLD TABLE AS old_subscriptions
FOR EACH STATEMENT EXECUTE FUNCTION subscriptions_deleted();

-- name: consumer_lag
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
