"""Check sources: a producer group's own database answers its check-backs.

`check_sources` holds, per producer group, the libpq URL of the group's
database without its password, the password encrypted with the
coordinator's key, the barrier table, the mode (`fallback` or `only`) and
how its last check went. A check request may now be `via = 'database'`:
dispatched to the group's check source, addressed to no instance.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.db.migration_sql import execute_block

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
