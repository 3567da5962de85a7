-- Check-back: storage of check_requests and the view check_backs. The
-- trigger that closes a check request when its message leaves `prepared` is
-- messages_changed (messages.sql).

-- name: check_requests_storage
-- Every row is rewritten at each check of its message: keep room for
-- in-page (HOT) updates and vacuum early.
ALTER TABLE check_requests SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05);

-- name: check_backs
CREATE VIEW check_backs AS
SELECT c.message_offset, m.transaction_id, m.message_id, c.producer_group, m.topic,
       c.status, c.via, c.instance_id, c.check_count, c.no_producer_attempts,
       c.claimed_at, c.delivered_at, m.next_check_at, m.born_at, c.detail
FROM check_requests c
JOIN messages m ON m.id = c.message_offset;
