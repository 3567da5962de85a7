"""Check-back engine: producer registry, check requests.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from coordinator.db.migration_sql import execute_block

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHECK_STATUSES = "'no_producer', 'pending', 'pushing', 'delivered', 'failed'"
DISPATCH_MODES = "'pull', 'push'"


def upgrade() -> None:
    op.create_table(
        "producers",
        sa.Column("producer_group", sa.Text, nullable=False),
        sa.Column("instance_id", sa.Text, nullable=False),
        sa.Column("check_url", sa.Text, nullable=True),
        sa.Column(
            "registered_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.Column(
            "last_seen_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.PrimaryKeyConstraint("producer_group", "instance_id", name="pk_producers"),
    )

    op.create_table(
        "check_requests",
        sa.Column("message_offset", sa.BigInteger, nullable=False),
        sa.Column("producer_group", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("via", sa.Text, nullable=True),
        sa.Column("instance_id", sa.Text, nullable=True),
        sa.Column("check_count", sa.Integer, nullable=False),
        sa.Column("no_producer_attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column(
            "claimed_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("detail", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("message_offset", name="pk_check_requests"),
        sa.ForeignKeyConstraint(
            ["message_offset"],
            ["messages.id"],
            name="fk_check_requests_message_offset_messages",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(f"status IN ({CHECK_STATUSES})", name="ck_check_requests_status"),
        sa.CheckConstraint(
            f"via IS NULL OR via IN ({DISPATCH_MODES})", name="ck_check_requests_via"
        ),
        sa.CheckConstraint(
            "(status = 'no_producer') = (instance_id IS NULL) "
            "AND (instance_id IS NULL) = (via IS NULL)",
            name="ck_check_requests_addressed",
        ),
    )
    op.create_index(
        "ix_check_requests_producer_group_instance_id",
        "check_requests",
        ["producer_group", "instance_id"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_check_requests_producer_group",
        "check_requests",
        ["producer_group"],
        postgresql_where=sa.text("status = 'no_producer'"),
    )
    # The storage parameters of check_requests, the trigger closing check
    # requests, and the view check_backs (0002_checkback.sql).
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
    op.drop_table("check_requests")
    op.drop_table("producers")
