"""Message ids unique per producer group, no longer across the whole coordinator.

A message id was unique among all messages, so one producer group could
take an id another group would use later (that group's send was then
refused as a reuse of the id) and could learn which ids exist. Now a
message id is unique within its producer group, and a message sent without
one (a normal message) has its id unique within its topic: two partial
unique indexes. Both lead with message_id, so a lookup by id alone still
reads an index.

The indexes are built inside the migration's transaction (not
CONCURRENTLY, which Alembic's transaction does not allow): writes to
messages wait for the build.

A downgrade restores the single unique constraint, and so refuses (with a
sentence) while two messages share an id.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.db.migration_sql import execute_block

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
