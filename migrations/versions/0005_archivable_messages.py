"""The view `archivable_messages`: the one definition of what the archive may take.

The archive's copy and its checksums (of messages and of their history)
must select exactly the same messages; they now all read this view instead
of repeating its conditions.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Resolved (never prepared), and nothing left to deliver: no delivery row,
# no dead letter. The archive adds its run's bounds (resolved before the
# cutoff, offset up to the newest it planned with).
ARCHIVABLE_MESSAGES_VIEW = """
CREATE VIEW archivable_messages AS
SELECT m.*
FROM messages m
WHERE m.state <> 'prepared'
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_offset = m.id)
  AND NOT EXISTS (SELECT 1 FROM dead_letters l WHERE l.message_offset = m.id)
"""


def upgrade() -> None:
    op.execute(ARCHIVABLE_MESSAGES_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS archivable_messages")
