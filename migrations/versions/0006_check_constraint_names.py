"""Check constraints named ck_<table>_<what>, without the doubled prefix.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.db.migration_sql import execute_block

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
