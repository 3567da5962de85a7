-- The SQL of migration 0016 (0016_delivery_requeued_at.py runs these blocks).
-- Frozen like the migration itself: the current definitions are in
-- coordinator/db/schema.py.

-- name: upgrade
ALTER TABLE deliveries ADD COLUMN requeued_at timestamptz;
CREATE INDEX ix_deliveries_requeued_committed_at ON deliveries (committed_at)
WHERE requeued_at IS NOT NULL;

-- name: downgrade
DROP INDEX ix_deliveries_requeued_committed_at;
ALTER TABLE deliveries DROP COLUMN requeued_at;
