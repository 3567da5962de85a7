"""The view `archivable_messages`: the one definition of what the archive may take.

The archive's copy and its checksums (of messages and of their history)
must select exactly the same messages, so they all read this view and its
conditions are written once.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.db.migration_sql import execute_block

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
