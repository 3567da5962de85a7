"""A BRIN index on messages.born_at: the report reads hours of birth by range.

An incremental `coordinator pipeline report` reads again only the hours
whose figures may still change (recent ones, and older ones with a prepared
message); each is a born_at range. Messages are inserted in birth order, so
a block range summary (a few kilobytes for millions of rows, nothing to
update on the insert path but the last range) finds them without a scan of
the table.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_messages_born_at", "messages", ["born_at"], postgresql_using="brin")


def downgrade() -> None:
    op.drop_index("ix_messages_born_at", table_name="messages")
