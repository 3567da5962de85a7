"""A requeued dead letter counts its unacked retention from the requeue.

`deliveries.requeued_at` is when a dead letter was moved back to its
group's deliveries (NULL for a delivery made at the commit). The retention
job drops an unacked delivery unacked_retention_hours after the latest of
its commit, its delivery time and its requeue, so a dead letter requeued
after that bound is not dropped by the next round. The partial index
`ix_deliveries_requeued_committed_at` holds the requeued deliveries only
(few), so the oldest pending commit is read from two index heads: the
first delivery by id, and the oldest requeued one, whose commit time is
older than its id says.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.db.migration_sql import execute_block

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
