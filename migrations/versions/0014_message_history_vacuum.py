"""message_history vacuums after 5% of its rows are dead, like messages.

The retention job deletes old history rows in batches; with PostgreSQL's
default scale factor (20%) a history of ten million rows would wait for two
million dead rows before autovacuum makes their space reusable.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.db.migration_sql import execute_block

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
