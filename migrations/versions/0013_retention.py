"""What the retention job reads: when each consumer group last received, dead letters by age.

`subscriptions.last_received_at` is when a receive of the group last asked,
recorded by the retention job from what each node saw (a receive itself
writes nothing more): a group that has not received for
idle_consumer_group_hours is idle. `ix_dead_letters_dead_at` lets the job
take the oldest dead letters first without reading the table.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.db.migration_sql import execute_block

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
