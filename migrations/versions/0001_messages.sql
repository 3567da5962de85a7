-- The SQL of migration 0001 (0001_messages.py runs these blocks). Frozen
-- like the migration itself: the current definitions are in
-- coordinator/db/sql/schema/.

-- name: upgrade
-- Every message row is updated once or twice (resolution, check counts):
-- leave room for in-page updates and vacuum well before the default 20%.
ALTER TABLE messages SET (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);

CREATE VIEW pending_transactions AS
SELECT id AS message_offset, message_id, transaction_id, producer_group, topic, tags,
       born_at, now() - born_at AS age, check_count, check_immunity, next_check_at
FROM messages
WHERE state = 'prepared';

CREATE VIEW message_counts AS
SELECT producer_group, topic, state, count(*) AS messages, min(born_at) AS oldest_born_at
FROM messages
GROUP BY producer_group, topic, state;

CREATE VIEW message_timeline AS
SELECT m.id AS message_offset, m.message_id, m.transaction_id, m.producer_group,
       m.topic, h.id AS history_id, h.at, h.source, h.from_state, h.to_state, h.detail
FROM message_history h
JOIN messages m ON m.id = h.message_offset;

-- name: downgrade
DROP VIEW IF EXISTS message_timeline;
DROP VIEW IF EXISTS message_counts;
DROP VIEW IF EXISTS pending_transactions;
