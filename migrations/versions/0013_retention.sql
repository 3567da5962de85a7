-- The SQL of migration 0013 (0013_retention.py runs these blocks).
-- Frozen like the migration itself: the current definitions are in
-- coordinator/db/schema.py.

-- name: upgrade
ALTER TABLE subscriptions ADD COLUMN last_received_at timestamptz;
CREATE INDEX ix_dead_letters_dead_at ON dead_letters (dead_at);

-- name: downgrade
DROP INDEX ix_dead_letters_dead_at;
ALTER TABLE subscriptions DROP COLUMN last_received_at;
