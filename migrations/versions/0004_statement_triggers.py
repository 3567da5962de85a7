"""Hot-path integrity by statement-level triggers instead of row-level foreign keys.

A batch commit of 200 messages used to fire 200 foreign-key checks on
`message_history`, 200 row triggers closing check requests, and two
foreign-key checks per delivery row; each check is a query planned anew
(the pool plans every statement with its parameters). Together they were
more than half of what Postgres spent on a commit (#6). Now:

- `messages_changed()` runs once per INSERT or UPDATE statement on
  `messages`: it fans newly committed messages out to deliveries (as in
  0003) and closes the check requests of messages that left `prepared`
  (0002's row trigger). It reads only the statement's transition tables and
  index lookups, so its plans are cached (generic) and never scan a table.
- The foreign keys from `message_history` and `deliveries` to `messages`,
  and from `deliveries` to `subscriptions`, are gone. Those rows are only
  written by the statement (or trigger) that reads the row they point to;
  deleting a message or a subscription still removes its dependents, by an
  AFTER DELETE statement trigger in place of ON DELETE CASCADE. The fan-out
  takes a key-share lock on the subscriptions it reads (once per statement,
  where the foreign key took one per delivery), so an unsubscribe waits for
  a commit that is fanning out to it and then removes what it fanned out.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The plans are generic (planned once per session) and may not scan a table:
# the arrays below can hold one id or thousands, and a table that was empty
# when the plan was made may hold millions of rows later.
MESSAGES_CHANGED_FUNCTION = """
CREATE FUNCTION messages_changed() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    ids bigint[];          -- newly committed messages, in offset order
    topics text[];
    tag_values text[];
    message_groups text[];
    closed bigint[];       -- messages that left 'prepared'
    notified text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.id ORDER BY n.id), array_agg(n.topic ORDER BY n.id),
               array_agg(n.tags ORDER BY n.id), array_agg(n.message_group ORDER BY n.id)
        INTO ids, topics, tag_values, message_groups
        FROM new_messages n
        WHERE n.state = 'committed';
    ELSE
        -- Only a change *to* 'committed' delivers: re-running for an already
        -- committed row (any other UPDATE, e.g. check counts) adds nothing.
        SELECT array_agg(c.id ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.topic ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.tags ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.message_group ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.id) FILTER (WHERE c.closes)
        INTO ids, topics, tag_values, message_groups, closed
        FROM (
            SELECT n.id, n.topic, n.tags, n.message_group,
                   n.state = 'committed' AND o.state <> 'committed' AS delivers,
                   o.state = 'prepared' AND n.state <> 'prepared' AS closes
            FROM new_messages n
            JOIN old_messages o ON o.id = n.id
        ) AS c;
        -- A resolved message needs no more check-backs.
        IF closed IS NOT NULL THEN
            DELETE FROM check_requests WHERE message_offset = ANY (closed);
        END IF;
    END IF;
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    -- FIFO: commits of one message group take turns from here until they
    -- commit, so delivery ids within a message group follow commit order and
    -- a lower id can never become visible after a higher one was handed out.
    -- Locks are taken in key order so that batches cannot deadlock. (The IF
    -- is a plain expression, no query: most commits have no message group.)
    IF cardinality(array_remove(message_groups, NULL)) > 0 THEN
        PERFORM pg_advisory_xact_lock(keys.k)
        FROM (
            SELECT DISTINCT hashtextextended(m.topic || ' ' || m.message_group, 4004) AS k
            FROM unnest(topics, message_groups) AS m (topic, message_group)
            WHERE m.message_group IS NOT NULL
              AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.topic = m.topic AND s.fifo)
            ORDER BY k
        ) AS keys;
    END IF;
    -- ORDER BY m.id gives a batch's deliveries ids in offset order.
    WITH subscribed AS (
        SELECT s.consumer_group, s.topic, s.tags
        FROM subscriptions s
        WHERE s.topic = ANY (topics)
        FOR KEY SHARE
    ),
    fanned AS (
        INSERT INTO deliveries (message_offset, consumer_group, topic, message_group)
        SELECT m.id, s.consumer_group, m.topic, m.message_group
        FROM unnest(ids, topics, tag_values, message_groups) AS m (id, topic, tags, message_group)
        JOIN subscribed s ON s.topic = m.topic
        WHERE s.tags IS NULL OR m.tags = ANY (s.tags)
        ORDER BY m.id, s.consumer_group
        ON CONFLICT (message_offset, consumer_group) DO NOTHING
        RETURNING consumer_group
    )
    SELECT array_agg(DISTINCT consumer_group) INTO notified FROM fanned;
    -- Delivered to waiting receivers only once this transaction commits.
    IF notified IS NOT NULL THEN
        PERFORM pg_notify('coordinator_deliveries', g) FROM unnest(notified) AS g;
    END IF;
    RETURN NULL;
END
$$
"""

# ON DELETE CASCADE, once per statement. Each plpgsql statement takes a new
# snapshot, so rows a concurrent transaction committed while this DELETE
# waited for its locks are seen and removed too.
MESSAGES_DELETED_FUNCTION = """
CREATE FUNCTION messages_deleted() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    gone bigint[] := ARRAY(SELECT id FROM old_messages);
BEGIN
    DELETE FROM message_history WHERE message_offset = ANY (gone);
    DELETE FROM deliveries WHERE message_offset = ANY (gone);
    RETURN NULL;
END
$$
"""

SUBSCRIPTIONS_DELETED_FUNCTION = """
CREATE FUNCTION subscriptions_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM deliveries d
    USING old_subscriptions s
    WHERE d.consumer_group = s.consumer_group AND d.topic = s.topic;
    RETURN NULL;
END
$$
"""

DROPPED_FOREIGN_KEYS = [
    ("message_history", "fk_message_history_message_offset_messages"),
    ("deliveries", "fk_deliveries_message_offset_messages"),
    ("deliveries", "fk_deliveries_consumer_group_subscriptions"),
]


def upgrade() -> None:
    for table, name in DROPPED_FOREIGN_KEYS:
        op.drop_constraint(name, table, type_="foreignkey")

    op.execute("DROP TRIGGER messages_close_check_request ON messages")
    op.execute("DROP FUNCTION coordinator_close_check_request()")
    op.execute("DROP TRIGGER messages_deliver_inserted ON messages")
    op.execute("DROP TRIGGER messages_deliver_updated ON messages")
    op.execute("DROP FUNCTION deliver_committed_messages()")

    op.execute(MESSAGES_CHANGED_FUNCTION)
    # Transition tables cannot serve a trigger with two events, hence one
    # trigger per event sharing the function.
    op.execute(
        "CREATE TRIGGER messages_changed_inserted AFTER INSERT ON messages "
        "REFERENCING NEW TABLE AS new_messages "
        "FOR EACH STATEMENT EXECUTE FUNCTION messages_changed()"
    )
    op.execute(
        "CREATE TRIGGER messages_changed_updated AFTER UPDATE ON messages "
        "REFERENCING OLD TABLE AS old_messages NEW TABLE AS new_messages "
        "FOR EACH STATEMENT EXECUTE FUNCTION messages_changed()"
    )
    op.execute(MESSAGES_DELETED_FUNCTION)
    op.execute(
        "CREATE TRIGGER messages_deleted AFTER DELETE ON messages "
        "REFERENCING OLD TABLE AS old_messages "
        "FOR EACH STATEMENT EXECUTE FUNCTION messages_deleted()"
    )
    op.execute(SUBSCRIPTIONS_DELETED_FUNCTION)
    op.execute(
        "CREATE TRIGGER subscriptions_deleted AFTER DELETE ON subscriptions "
        "REFERENCING OLD TABLE AS old_subscriptions "
        "FOR EACH STATEMENT EXECUTE FUNCTION subscriptions_deleted()"
    )


def _earlier_migration(filename: str) -> ModuleType:
    # Revision modules are not importable by name (they start with a digit).
    path = Path(__file__).with_name(filename)
    spec = importlib.util.spec_from_file_location(f"coordinator_migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def downgrade() -> None:
    op.execute("DROP TRIGGER subscriptions_deleted ON subscriptions")
    op.execute("DROP FUNCTION subscriptions_deleted()")
    op.execute("DROP TRIGGER messages_deleted ON messages")
    op.execute("DROP FUNCTION messages_deleted()")
    op.execute("DROP TRIGGER messages_changed_updated ON messages")
    op.execute("DROP TRIGGER messages_changed_inserted ON messages")
    op.execute("DROP FUNCTION messages_changed()")

    # Rows the foreign keys would have refused cannot block the downgrade.
    op.execute(
        "DELETE FROM message_history h WHERE NOT EXISTS "
        "(SELECT 1 FROM messages m WHERE m.id = h.message_offset)"
    )
    op.execute(
        "DELETE FROM deliveries d WHERE NOT EXISTS "
        "(SELECT 1 FROM messages m WHERE m.id = d.message_offset) OR NOT EXISTS "
        "(SELECT 1 FROM subscriptions s WHERE s.consumer_group = d.consumer_group "
        "AND s.topic = d.topic)"
    )
    op.create_foreign_key(
        "fk_message_history_message_offset_messages",
        "message_history",
        "messages",
        ["message_offset"],
        ["id"],
        ondelete="CASCADE",
    )
    op.create_foreign_key(
        "fk_deliveries_message_offset_messages",
        "deliveries",
        "messages",
        ["message_offset"],
        ["id"],
        ondelete="CASCADE",
    )
    op.create_foreign_key(
        "fk_deliveries_consumer_group_subscriptions",
        "deliveries",
        "subscriptions",
        ["consumer_group", "topic"],
        ["consumer_group", "topic"],
        ondelete="CASCADE",
    )

    delivery = _earlier_migration("0003_delivery.py")
    op.execute(delivery.FAN_OUT_FUNCTION)
    for trigger in delivery.FAN_OUT_TRIGGERS:
        op.execute(trigger)
    checkback = _earlier_migration("0002_checkback.py")
    op.execute(checkback.CLOSE_CHECK_REQUEST_FUNCTION)
    op.execute(checkback.CLOSE_CHECK_REQUEST_TRIGGER)
