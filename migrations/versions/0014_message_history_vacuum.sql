-- The SQL of migration 0014 (0014_message_history_vacuum.py runs these blocks).
-- Frozen like the migration itself: the current definitions are in
-- coordinator/db/sql/schema/messages.sql.

-- name: upgrade
ALTER TABLE message_history SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);

-- name: downgrade
ALTER TABLE message_history RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor);
