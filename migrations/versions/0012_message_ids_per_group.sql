-- The SQL of migration 0012 (0012_message_ids_per_group.py runs these blocks).
-- Frozen like the migration itself: the current definitions are in
-- coordinator/db/schema.py.

-- name: upgrade
CREATE UNIQUE INDEX uq_messages_message_id_producer_group
ON messages (message_id, producer_group)
WHERE producer_group IS NOT NULL;
CREATE UNIQUE INDEX uq_messages_message_id_topic
ON messages (message_id, topic)
WHERE producer_group IS NULL;
ALTER TABLE messages DROP CONSTRAINT uq_messages_message_id;

-- name: downgrade
DO $$
DECLARE
    shared bigint;
BEGIN
    SELECT count(*) INTO shared
    FROM (SELECT message_id FROM messages GROUP BY message_id HAVING count(*) > 1) AS d;
    IF shared > 0 THEN
        RAISE EXCEPTION 'cannot downgrade below revision 0012: % message id(s) are used by '
            'more than one producer group or topic, and the older schema holds each id once',
            shared
            USING HINT = 'delete or archive the extra messages first; '
                'SELECT message_id FROM messages GROUP BY message_id HAVING count(*) > 1 '
                'lists them';
    END IF;
END
$$;
ALTER TABLE messages ADD CONSTRAINT uq_messages_message_id UNIQUE (message_id);
DROP INDEX uq_messages_message_id_topic;
DROP INDEX uq_messages_message_id_producer_group;
