"""Half messages, their history, and the views people query.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from coordinator.db.migration_sql import execute_block

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATES = "'prepared', 'committed', 'rolled_back', 'discarded', 'expired'"
SOURCES = "'client', 'check', 'operator', 'discard', 'expiry'"


def upgrade() -> None:
    op.create_table(
        "messages",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column("message_id", sa.Text, nullable=False),
        sa.Column("transaction_id", sa.Text, nullable=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("producer_group", sa.Text, nullable=True),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("tags", sa.Text, nullable=True),
        sa.Column(
            "keys",
            postgresql.ARRAY(sa.Text),
            nullable=False,
            server_default=sa.text("'{}'::text[]"),
        ),
        sa.Column("message_group", sa.Text, nullable=True),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column(
            "properties",
            postgresql.JSONB,
            nullable=False,
            server_default=sa.text("'{}'::jsonb"),
        ),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("check_count", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("check_immunity", sa.Interval, nullable=True),
        sa.Column(
            "born_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
        ),
        sa.Column("next_check_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolution_source", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_messages"),
        sa.UniqueConstraint("message_id", name="uq_messages_message_id"),
        sa.UniqueConstraint("transaction_id", name="uq_messages_transaction_id"),
        sa.CheckConstraint(f"state IN ({STATES})", name="ck_messages_state"),
        sa.CheckConstraint("kind IN ('transactional', 'normal')", name="ck_messages_kind"),
        sa.CheckConstraint(
            f"resolution_source IS NULL OR resolution_source IN ({SOURCES})",
            name="ck_messages_resolution_source",
        ),
        sa.CheckConstraint("check_count >= 0", name="ck_messages_check_count"),
        sa.CheckConstraint(
            "kind = 'normal' OR (transaction_id IS NOT NULL AND producer_group IS NOT NULL)",
            name="ck_messages_transactional_ids",
        ),
        sa.CheckConstraint(
            "(state = 'prepared') = (resolved_at IS NULL)",
            name="ck_messages_resolved_at_matches_state",
        ),
    )
    op.create_index(
        "ix_messages_due_for_check",
        "messages",
        ["next_check_at"],
        postgresql_where=sa.text("state = 'prepared'"),
    )
    op.create_index("ix_messages_topic_state", "messages", ["topic", "state"])
    op.create_index("ix_messages_resolved_at", "messages", ["resolved_at"])

    op.create_table(
        "message_history",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column("message_offset", sa.BigInteger, nullable=False),
        sa.Column(
            "at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
        ),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("from_state", sa.Text, nullable=True),
        sa.Column("to_state", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_message_history"),
        sa.ForeignKeyConstraint(
            ["message_offset"],
            ["messages.id"],
            name="fk_message_history_message_offset_messages",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(f"source IN ({SOURCES})", name="ck_message_history_source"),
        sa.CheckConstraint(
            f"from_state IS NULL OR from_state IN ({STATES})",
            name="ck_message_history_from_state",
        ),
        sa.CheckConstraint(f"to_state IN ({STATES})", name="ck_message_history_to_state"),
    )
    op.create_index("ix_message_history_message_offset", "message_history", ["message_offset"])

    # The storage parameters of messages, and the views (0001_messages.sql).
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
    op.drop_table("message_history")
    op.drop_table("messages")
