"""The read-only group role `coordinator_reader`: SELECT on the documented views.

Operators GRANT it to their own login roles to watch the coordinator with
SQL (pending transactions, counts, timelines, check-backs, consumer lag)
without reading message bodies or writing anything. The role is
cluster-wide, so it is created only if missing and dropped on downgrade only
if nothing else (another database, a member) still needs it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.db.migration_sql import execute_block

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
