-- The SQL of migration 0002 (0002_checkback.py runs these blocks). Frozen
-- like the migration itself: the current definitions are in
-- coordinator/db/sql/schema/.

-- name: upgrade
-- Every row is rewritten at each check of its message: keep room for
-- in-page (HOT) updates and vacuum early.
ALTER TABLE check_requests SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05);

-- A message that leaves `prepared` (by any path: its producer, a check-back
-- answer, an operator, discard, expiry) has nothing left to check: its
-- check request goes with it, so the table stays as small as the backlog.
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

CREATE VIEW check_backs AS
SELECT c.message_offset, m.transaction_id, m.message_id, c.producer_group, m.topic,
       c.status, c.via, c.instance_id, c.check_count, c.no_producer_attempts,
       c.claimed_at, c.delivered_at, m.next_check_at, m.born_at, c.detail
FROM check_requests c
JOIN messages m ON m.id = c.message_offset;

-- name: downgrade
DROP VIEW IF EXISTS check_backs;
DROP TRIGGER IF EXISTS messages_close_check_request ON messages;
DROP FUNCTION IF EXISTS coordinator_close_check_request();
