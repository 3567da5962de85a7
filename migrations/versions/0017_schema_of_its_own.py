"""The coordinator's objects move from public into a schema of their own.

The schema is the setting database_schema (`coordinator` by default),
which env.py creates and names in `coordinator.database_schema` for this
migration. Its tables (with their indexes, constraints, triggers and
identity sequences), views and functions move there from public, unless
the schema already has them (a database first migrated with a schema:
public may hold an application's tables of the same names). The functions
then run with that schema as their search_path, whoever calls them; the
read-only role uses the schema instead of public. env.py moves Alembic's
version table with them, and back on a downgrade.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.db.migration_sql import execute_block

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
