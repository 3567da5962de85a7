"""Delivery (issue 4): subscriptions, deliveries, dead letters.

A trigger on `messages` fans every newly committed message out to the
deliveries of the consumer groups subscribed to its topic (tag filter
matched in SQL), in the transaction that commits it, whichever path
committed it: a producer's end, a check-back, an operator, a normal message
inserted as committed, or a hand-written UPDATE.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Statement-level, so a batch commit fans out in one INSERT. Transition tables
# cannot serve a trigger with two events, hence one trigger per event sharing
# the function. Only a change *to* 'committed' counts: prepared, rolled back,
# discarded and expired messages never reach a consumer, and re-running the
# trigger for an already committed row (any other UPDATE, e.g. check counts)
# adds nothing. ORDER BY m.id gives a batch's deliveries ids in offset order;
# FIFO subscriptions hand a message group's deliveries out in id order.
FAN_OUT_FUNCTION = """
CREATE FUNCTION deliver_committed_messages() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    committed bigint[];
    notified text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        committed := ARRAY(SELECT id FROM new_messages WHERE state = 'committed');
    ELSE
        committed := ARRAY(
            SELECT n.id
            FROM new_messages n
            JOIN old_messages o ON o.id = n.id
            WHERE n.state = 'committed' AND o.state <> 'committed'
        );
    END IF;
    IF cardinality(committed) = 0 THEN
        RETURN NULL;
    END IF;
    -- FIFO: commits of one message group take turns from here until they
    -- commit, so delivery ids within a message group follow commit order and
    -- a lower id can never become visible after a higher one was handed out.
    -- Locks are taken in key order so that batches cannot deadlock.
    PERFORM pg_advisory_xact_lock(keys.k)
    FROM (
        SELECT DISTINCT hashtextextended(m.topic || ' ' || m.message_group, 4004) AS k
        FROM messages m
        WHERE m.id = ANY (committed)
          AND m.message_group IS NOT NULL
          AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.topic = m.topic AND s.fifo)
        ORDER BY k
    ) AS keys;
    WITH fanned AS (
        INSERT INTO deliveries (message_offset, consumer_group, topic, message_group)
        SELECT m.id, s.consumer_group, m.topic, m.message_group
        FROM messages m
        JOIN subscriptions s ON s.topic = m.topic
        WHERE m.id = ANY (committed)
          AND (s.tags IS NULL OR m.tags = ANY (s.tags))
        ORDER BY m.id, s.consumer_group
        ON CONFLICT (message_offset, consumer_group) DO NOTHING
        RETURNING consumer_group
    )
    SELECT array_agg(DISTINCT consumer_group) INTO notified FROM fanned;
    -- Delivered to waiting receivers only once this transaction commits.
    PERFORM pg_notify('coordinator_deliveries', g) FROM unnest(notified) AS g;
    RETURN NULL;
END
$$
"""

FAN_OUT_TRIGGERS = [
    "CREATE TRIGGER messages_deliver_inserted AFTER INSERT ON messages "
    "REFERENCING NEW TABLE AS new_messages "
    "FOR EACH STATEMENT EXECUTE FUNCTION deliver_committed_messages()",
    "CREATE TRIGGER messages_deliver_updated AFTER UPDATE ON messages "
    "REFERENCING OLD TABLE AS old_messages NEW TABLE AS new_messages "
    "FOR EACH STATEMENT EXECUTE FUNCTION deliver_committed_messages()",
]

CONSUMER_LAG_VIEW = """
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
LEFT JOIN dead USING (consumer_group, topic)
"""


def upgrade() -> None:
    op.create_table(
        "subscriptions",
        sa.Column("consumer_group", sa.Text, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("expression", sa.Text, nullable=False),
        sa.Column("tags", postgresql.ARRAY(sa.Text), nullable=True),
        sa.Column("fifo", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column(
            "max_delivery_attempts", sa.Integer, nullable=False, server_default=sa.text("16")
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.PrimaryKeyConstraint("consumer_group", "topic", name="pk_subscriptions"),
        sa.CheckConstraint(
            "max_delivery_attempts >= 1", name="ck_subscriptions_max_delivery_attempts"
        ),
    )
    op.create_index("ix_subscriptions_topic", "subscriptions", ["topic"])

    op.create_table(
        "deliveries",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column("message_offset", sa.BigInteger, nullable=False),
        sa.Column("consumer_group", sa.Text, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("message_group", sa.Text, nullable=True),
        sa.Column(
            "committed_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.Column(
            "visible_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("receipt_handle", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_deliveries"),
        sa.ForeignKeyConstraint(
            ["message_offset"],
            ["messages.id"],
            name="fk_deliveries_message_offset_messages",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["consumer_group", "topic"],
            ["subscriptions.consumer_group", "subscriptions.topic"],
            name="fk_deliveries_consumer_group_subscriptions",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "message_offset", "consumer_group", name="uq_deliveries_message_offset_consumer_group"
        ),
        sa.CheckConstraint("attempts >= 0", name="ck_deliveries_attempts"),
    )
    op.create_index("ix_deliveries_consumer_group_id", "deliveries", ["consumer_group", "id"])
    op.create_index(
        "ix_deliveries_fifo",
        "deliveries",
        ["consumer_group", "topic", "message_group", "id"],
        postgresql_where=sa.text("message_group IS NOT NULL"),
    )
    # A queue table: every row is inserted, updated at least once and deleted.
    # Room for HOT updates (no updated column is indexed), and vacuum after a
    # small, fixed number of dead rows instead of 20% of a table that is
    # mostly dead rows, unthrottled because the table stays small.
    op.execute(
        "ALTER TABLE deliveries SET (fillfactor = 70, "
        "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, "
        "autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)"
    )

    op.create_table(
        "dead_letters",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column("message_offset", sa.BigInteger, nullable=False),
        sa.Column("consumer_group", sa.Text, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "dead_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.PrimaryKeyConstraint("id", name="pk_dead_letters"),
        sa.ForeignKeyConstraint(
            ["message_offset"],
            ["messages.id"],
            name="fk_dead_letters_message_offset_messages",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "message_offset",
            "consumer_group",
            name="uq_dead_letters_message_offset_consumer_group",
        ),
    )
    op.create_index("ix_dead_letters_consumer_group_id", "dead_letters", ["consumer_group", "id"])

    op.execute(FAN_OUT_FUNCTION)
    for trigger in FAN_OUT_TRIGGERS:
        op.execute(trigger)
    op.execute(CONSUMER_LAG_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS consumer_lag")
    op.execute("DROP TRIGGER IF EXISTS messages_deliver_updated ON messages")
    op.execute("DROP TRIGGER IF EXISTS messages_deliver_inserted ON messages")
    op.execute("DROP FUNCTION IF EXISTS deliver_committed_messages()")
    op.drop_table("dead_letters")
    op.drop_table("deliveries")
    op.drop_table("subscriptions")
