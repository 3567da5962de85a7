"""Delivery: subscriptions, deliveries, dead letters.

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

from coordinator.db.migration_sql import execute_block

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


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

    # The storage parameters of deliveries, the fan-out trigger, and the view
    # consumer_lag (0003_delivery.sql).
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
    op.drop_table("dead_letters")
    op.drop_table("deliveries")
    op.drop_table("subscriptions")
