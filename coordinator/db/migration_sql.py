"""A migration's SQL, read from the `.sql` file next to its `.py` file.

The file holds blocks headed `-- name: NAME` (the named-query format). A
migration runs only its own blocks: the history is frozen, so a downgrade
that restores older objects carries their definitions itself instead of
reading another migration's file.
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

from coordinator.db.queries import parse_queries


def execute_block(migration_file: str, name: str) -> None:
    """Run block `name` of the migration whose `__file__` is `migration_file`."""
    sql_file = Path(migration_file).with_suffix(".sql")
    op.execute(parse_queries(sql_file.read_text())[name])
