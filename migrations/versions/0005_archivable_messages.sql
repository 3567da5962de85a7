-- The SQL of migration 0005 (0005_archivable_messages.py runs these blocks).
-- Frozen like the migration itself: the current definitions are in
-- coordinator/db/sql/schema/.

-- name: upgrade
-- Resolved (never prepared), and nothing left to deliver: no delivery row,
-- no dead letter. The archive adds its run's bounds (resolved before the
-- cutoff, offset up to the newest it planned with).
CREATE VIEW archivable_messages AS
SELECT m.*
FROM messages m
WHERE m.state <> 'prepared'
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_offset = m.id)
  AND NOT EXISTS (SELECT 1 FROM dead_letters l WHERE l.message_offset = m.id);

-- name: downgrade
DROP VIEW IF EXISTS archivable_messages;
