"""Check-back engine (issue 3): producer registry, check requests.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHECK_STATUSES = "'no_producer', 'pending', 'pushing', 'delivered', 'failed'"
DISPATCH_MODES = "'pull', 'push'"

# (Replaced by a statement-level trigger in 0004, which restores these on downgrade.)
CLOSE_CHECK_REQUEST_FUNCTION = """
CREATE FUNCTION coordinator_close_check_request() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM check_requests WHERE message_offset = NEW.id;
    RETURN NULL;
END
$$
"""
CLOSE_CHECK_REQUEST_TRIGGER = """
CREATE TRIGGER messages_close_check_request
AFTER UPDATE OF state ON messages
FOR EACH ROW
WHEN (OLD.state = 'prepared' AND NEW.state <> 'prepared')
EXECUTE FUNCTION coordinator_close_check_request()
"""


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
    # Every row is rewritten at each check of its message: keep room for
    # in-page (HOT) updates and vacuum early.
    op.execute(
        "ALTER TABLE check_requests SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05)"
    )

    # A message that leaves `prepared` (by any path: its producer, a check-back
    # answer, an operator, discard, expiry) has nothing left to check: its
    # check request goes with it, so the table stays as small as the backlog.
    op.execute(CLOSE_CHECK_REQUEST_FUNCTION)
    op.execute(CLOSE_CHECK_REQUEST_TRIGGER)

    op.execute(
        """
        CREATE VIEW check_backs AS
        SELECT c.message_offset, m.transaction_id, m.message_id, c.producer_group, m.topic,
               c.status, c.via, c.instance_id, c.check_count, c.no_producer_attempts,
               c.claimed_at, c.delivered_at, m.next_check_at, m.born_at, c.detail
        FROM check_requests c
        JOIN messages m ON m.id = c.message_offset
        """
    )


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS check_backs")
    op.execute("DROP TRIGGER IF EXISTS messages_close_check_request ON messages")
    op.execute("DROP FUNCTION IF EXISTS coordinator_close_check_request()")
    op.drop_table("check_requests")
    op.drop_table("producers")
